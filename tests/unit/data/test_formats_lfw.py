import shutil
from pathlib import Path

import numpy as np
import pytest

from scaleprobe.core.errors import ConfigError, DataError
from scaleprobe.data.formats import open_lfw_pairs, open_lfw_people, write_dataset
from scaleprobe.data.formats.lfw import LocalLFWPairs, LocalLFWPeople


@pytest.fixture(scope="module")
def lfw(tmp_path_factory) -> Path:
    return write_dataset("lfw", tmp_path_factory.mktemp("l") / "lfw", count=80, size=(64, 64))


@pytest.fixture
def copy(lfw, tmp_path) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(lfw, root)
    return root


@pytest.mark.parametrize("split", ["train", "test", "10fold"])
def test_torchvision_lfw_classes_read_every_split(lfw, split):
    pairs = LocalLFWPairs(str(lfw), split=split)
    people = LocalLFWPeople(str(lfw), split=split)
    img1, img2, same = pairs[0]
    assert img1.size == (64, 64) and same in (0, 1)
    assert sum(pairs.targets) * 2 == len(pairs)  # as many matched as mismatched pairs
    assert len(people) > 0 and all(Path(p).is_file() for p in people.data)
    ours_people, ours_pairs = open_lfw_pairs(lfw, split)
    assert [(str(a), str(b)) for a, b, _ in ours_pairs] == pairs.data
    assert [int(s) for *_, s in ours_pairs] == pairs.targets
    assert sorted(str(p) for p, _ in ours_people) == sorted(people.data)


def test_pairs_file_header_counts_the_pairs(lfw):
    text = (lfw / "lfw-py" / "pairs.txt").read_text().splitlines()
    folds, n = map(int, text[0].split("\t"))
    assert len(text) == 1 + folds * 2 * n
    train = (lfw / "lfw-py" / "pairsDevTrain.txt").read_text().splitlines()
    assert len(train) == 1 + 2 * int(train[0])


def test_train_and_test_people_are_different(lfw):
    train = open_lfw_people(lfw, "train")
    test = open_lfw_people(lfw, "test")
    assert not set(train.identities) & set(test.identities)
    assert sorted(set(train.targets)) == list(range(len(train.identities)))
    img, ident = train[0]
    assert img.mode == "RGB" and 0 <= ident < len(train.identities)


def test_pixels_alone_do_not_tell_people_apart(tmp_path):
    """Catches a nuisance drawn once per person instead of once per picture: a person's own
    colour cast, backdrop or face size (each alone) lets raw pixel distance verify pairs
    above 0.70, and the earlier per-person tint and background made same-person pairs less
    than half as far apart as others."""
    from PIL import Image

    from scaleprobe.tasks.verification import verification_accuracy

    root = write_dataset("lfw", tmp_path / "lfw", count=400, size=(32, 32))
    _, pairs = open_lfw_pairs(root, "10fold")

    def pixels(p):
        return np.asarray(Image.open(p), np.float32)

    dist = [float(((pixels(a) - pixels(b)) ** 2).mean()) for a, b, _ in pairs]
    acc = verification_accuracy(dist, [s for *_, s in pairs])["verification_accuracy"]
    assert len(pairs) >= 200 and acc <= 0.70, (len(pairs), acc)


def test_pictures_of_one_person_differ(lfw):
    """Catches per-picture variation switched off (every picture of a person the same
    image): matched pairs would then be near-identical."""
    from PIL import Image

    _, pairs = open_lfw_pairs(lfw, "train")
    same = [(a, b) for a, b, s in pairs if s]
    diffs = [np.abs(np.asarray(Image.open(a), np.float32) - np.asarray(Image.open(b), np.float32)
                    ).mean() for a, b in same]
    assert min(diffs) > 10, diffs


def test_pairs_line_naming_a_missing_person_gives_file_and_line(copy):
    f = copy / "lfw-py" / "pairsDevTrain.txt"
    lines = f.read_text().splitlines()
    name = lines[3].split("\t")[0]
    lines[3] = lines[3].replace(name, "Nobody_Here", 1)
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match="pairsDevTrain.txt line 4: person 'Nobody_Here'"):
        open_lfw_pairs(copy, "train")


def test_pairs_line_naming_a_missing_image_and_malformed_lines(copy):
    f = copy / "lfw-py" / "pairs.txt"
    lines = f.read_text().splitlines()
    parts = lines[1].split("\t")
    lines[1] = "\t".join([parts[0], parts[1], "99"])
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match="pairs.txt line 2: image 99 of .* not found"):
        open_lfw_pairs(copy, "10fold")
    lines[1] = "only_one_field"
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match="pairs.txt line 2: expected a matched pair"):
        open_lfw_pairs(copy, "10fold")
    f.write_text("\n".join(lines[:1] + lines[2:5]) + "\n")
    with pytest.raises(DataError, match="pairs.txt line 5: .*end of the file"):
        open_lfw_pairs(copy, "10fold")


def test_people_file_naming_a_missing_image(copy):
    f = copy / "lfw-py" / "peopleDevTest.txt"
    lines = f.read_text().splitlines()
    name, n = lines[1].split("\t")
    lines[1] = f"{name}\t{int(n) + 1}"
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=f"peopleDevTest.txt line 2: image {int(n) + 1} of"):
        open_lfw_people(copy, "test")


def test_corrupt_face_image_names_the_file(copy):
    faces = open_lfw_people(copy, "train")
    path = faces.samples[0][0]
    Path(path).write_bytes(b"\xff\xd8\xff broken")
    with pytest.raises(DataError, match=Path(path).name):
        faces[0]


def test_empty_folder_and_bad_split(tmp_path, lfw):
    with pytest.raises(DataError, match="no LFW data under .*datagen lfw"):
        open_lfw_pairs(tmp_path, "train")
    with pytest.raises(ConfigError, match="did you mean train"):
        open_lfw_pairs(lfw, "trian")
