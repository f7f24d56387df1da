"""Token data of --task lm: the token-file reader (uint16 / uint32, meta.json), windows,
the held-out selection, the unigram entropy, datagen text and its cache (data/token_windows.py,
data/formats/tokens.py, data/formats/text_gen.py)."""

import json
import math
import os
import pickle

import numpy as np
import pytest
import torch

from scaleprobe.config import runconfig as C
from scaleprobe.core.errors import ConfigError, DataError
from scaleprobe.data.datasets import build_split
from scaleprobe.data.formats import generate, open_tokens
from scaleprobe.data.formats import text_gen as TG
from scaleprobe.data.token_windows import TokenWindows, spread, text_cache, unigram_entropy
from scaleprobe.features.lmspec import resolved_data


def _write(root, train, val, dtype="<u2", meta=None):
    root.mkdir(parents=True, exist_ok=True)
    np.asarray(train, dtype=dtype).tofile(root / "train.bin")
    np.asarray(val, dtype=dtype).tofile(root / "val.bin")
    if meta is not None:
        (root / "meta.json").write_text(json.dumps(meta))
    return root


def _data(tmp_path, dataset="tokens", **kw):
    cfg = C.build({"task": "lm", "dataset": dataset, "data_dir": str(tmp_path), **kw})
    return resolved_data(cfg)


def test_sample_i_is_a_window_of_seq_len_plus_one_tokens_shifted_by_one(tmp_path):
    """Sample i = tokens[i*T : i*T+T+1]: input the first T, targets the next T. Windows share
    only their seam token, so one epoch reads every token once; (n - 1) // T samples."""
    root = _write(tmp_path, np.arange(1000) % 300, np.arange(50))
    split = build_split(_data(root, seq_len=8))
    assert len(split.train) == (1000 - 1) // 8 == 124
    x, y = split.train[3]
    assert x.dtype == torch.int64 and x.tolist() == list(range(24, 32))
    assert y.tolist() == list(range(25, 33))
    x, y = split.train[123]  # the last whole window
    assert y[-1].item() == 992 % 300
    with pytest.raises(IndexError):
        split.train[124]
    assert split.num_classes == 300 and split.image_size is None and split.seq_len == 8
    assert split.info["tokens_per_sample"] == 8 and split.info["vocab_size"] == 300


def test_uint32_tokens_with_their_vocabulary_from_meta_json(tmp_path):
    """A vocabulary past 65,536 (e.g. 100,277) needs uint32 files: read as such, not as
    pairs of uint16 halves."""
    tokens = np.array([0, 70000, 100276, 5, 65536, 1, 2, 3, 4], dtype="<u4")
    root = _write(tmp_path, tokens, tokens, "<u4", {"vocab_size": 100277, "dtype": "uint32"})
    split = build_split(_data(root, seq_len=4))
    assert split.num_classes == 100277
    x, y = split.train[0]
    assert x.tolist() == [0, 70000, 100276, 5] and y.tolist() == [70000, 100276, 5, 65536]


def test_without_meta_json_the_files_are_uint16_and_the_vocabulary_their_largest_token(tmp_path):
    root = _write(tmp_path, [1, 2, 3, 9, 4, 5], [7, 41, 2])
    splits, vocab, counts = open_tokens(root)
    assert vocab == 42  # the largest token of either split + 1
    assert splits["train"].tokens == 6 and splits["val"].dtype == np.dtype("<u2")
    assert counts.sum() == 6 and counts[9] == 1 and len(counts) == 42


def test_a_larger_vocabulary_may_be_given_a_smaller_one_is_an_error(tmp_path):
    root = _write(tmp_path, [1, 2, 3, 9, 4, 5], [7, 41, 2])
    assert open_tokens(root, vocab_size=64)[1] == 64
    with pytest.raises(DataError, match="token 41, outside the vocabulary of 40 .*at least 42"):
        open_tokens(root, vocab_size=40)


@pytest.mark.parametrize("case, message", [
    ("no folder", "token folder not found"),
    ("no val", r"token file not found: .*val.bin.*datagen text"),
    ("empty", "train.bin is empty"),
    ("odd bytes", "not a whole number of uint32 tokens"),
    ("bad dtype", "dtype 'int8' is not one of uint16, uint32"),
    ("too big for uint16", "does not fit uint16"),
    ("meta vocab too small", "outside the vocabulary of 3"),
    ("not json", "cannot read .*meta.json"),
    # bug caught: a folder or a FIFO said "token file not found"; unreadable, a PermissionError
    ("folder", r"train.bin is a folder, not a token file"),
    ("fifo", r"train.bin is not a regular file \(a FIFO"),
    ("unreadable", r"cannot read .*train.bin: Permission denied"),
])
def test_bad_token_folders_are_one_line_data_errors(tmp_path, case, message, monkeypatch):
    root = tmp_path / "d"
    if case != "no folder":
        _write(root, [1, 2, 3, 4], [1, 2, 3])
    if case == "no val":
        (root / "val.bin").unlink()
    elif case == "empty":
        (root / "train.bin").write_bytes(b"")
    elif case == "odd bytes":
        (root / "train.bin").write_bytes(b"\x01\x00\x00\x00\x02\x00")
        (root / "meta.json").write_text('{"dtype": "uint32"}')
    elif case == "bad dtype":
        (root / "meta.json").write_text('{"dtype": "int8"}')
    elif case == "too big for uint16":
        (root / "meta.json").write_text('{"vocab_size": 70000}')
    elif case == "meta vocab too small":
        (root / "meta.json").write_text('{"vocab_size": 3}')
    elif case == "not json":
        (root / "meta.json").write_text("{vocab_size: 3")
    elif case in ("folder", "fifo"):
        (root / "train.bin").unlink()
        (root / "train.bin").mkdir() if case == "folder" else os.mkfifo(root / "train.bin")
    elif case == "unreadable":
        (root / "train.bin").chmod(0)
        if os.geteuid() == 0:  # root reads it anyway: the error open(2) gives anyone else
            def refuse(path, *a, **k):
                raise PermissionError(13, "Permission denied", str(path))
            monkeypatch.setattr(np, "memmap", refuse)
    with pytest.raises(DataError, match=message) as e:
        open_tokens(root)
    assert "\n" not in str(e.value)


def test_a_sequence_longer_than_a_split_is_a_data_error(tmp_path):
    root = _write(tmp_path, np.arange(100), np.arange(20))
    with pytest.raises(DataError, match="val.bin holds 20 tokens, fewer than one sample of "
                                        r"seq_len \+ 1 = 33 \(lower --seq-len\)"):
        build_split(_data(root, seq_len=32))


def test_a_missing_data_dir_is_a_data_error_that_names_datagen(tmp_path):
    with pytest.raises(DataError, match="needs --data-dir DIR.*datagen text"):
        build_split(resolved_data(C.build({"task": "lm", "dataset": "tokens"})))
    with pytest.raises(DataError, match="not found"):
        build_split(_data(tmp_path / "nowhere"))


def test_held_out_windows_are_spread_evenly_over_the_split(tmp_path):
    """data.eval_windows picks k windows from the first to the last, not the first k (a
    held-out split sorted by source file would otherwise be judged on its first files)."""
    assert spread(10, 4) == [0, 3, 6, 9]
    assert spread(10, 1) == [0] and spread(10, None) is None and spread(10, 10) is None
    root = _write(tmp_path, np.arange(500), np.arange(401))
    split = build_split(_data(root, seq_len=4, eval_windows=3))
    assert len(split.val) == 3
    assert [split.val[i][0][0].item() for i in range(3)] == [0, 50 * 4, 99 * 4]  # windows 0, 50, 99
    everything = build_split(_data(root, seq_len=4, eval_windows="none"))
    assert len(everything.val) == 100


def test_a_window_dataset_pickles_without_its_memory_map(tmp_path):
    """Loader workers get the dataset pickled: a memory map would be copied whole into the
    pickle (a 20 GB corpus into every worker)."""
    root = _write(tmp_path, np.arange(10_000), np.arange(100))
    ds = TokenWindows(root / "train.bin", np.dtype("<u2"), 10_000, 16)
    ds[0]  # maps the file
    blob = pickle.dumps(ds)
    assert len(blob) < 2000
    assert pickle.loads(blob)[2][0].tolist() == list(range(32, 48))


def test_unigram_entropy_of_known_distributions():
    assert unigram_entropy([5, 5, 5, 5]) == pytest.approx(math.log(4))
    assert unigram_entropy([2, 1, 1, 0, 0]) == pytest.approx(
        -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)))
    assert unigram_entropy([7, 0, 0]) == 0.0
    with pytest.raises(ValueError):
        unigram_entropy([0, 0])


def test_the_training_splits_unigram_entropy_is_recorded(tmp_path):
    root = _write(tmp_path, [0, 0, 1, 1, 2, 2, 3, 3], [9, 9, 9])
    split = build_split(_data(root, seq_len=2))
    assert split.info["unigram_entropy_nats"] == pytest.approx(math.log(4))  # val not in it


def test_the_context_free_baseline_is_the_training_counts_add_one_smoothed(tmp_path):
    """Token t costs -ln((c(t) + 1) / (N + V)) nats: training counts 2, 2, 2, 2 of tokens
    0-3, vocabulary 10 (from token 9 in the held-out split), N = 8: a seen token costs
    ln(18 / 3), an unseen one ln(18). The held-out tokens do not enter the counts."""
    root = _write(tmp_path, [0, 0, 1, 1, 2, 2, 3, 3], [9, 9, 9])
    split = build_split(_data(root, seq_len=2))
    assert split.num_classes == 10
    nats = split.context_free
    assert nats.shape == (10,)
    assert nats[:4] == pytest.approx([math.log(18 / 3)] * 4)
    assert nats[4:] == pytest.approx([math.log(18)] * 6)
    # a distribution: the smoothed probabilities sum to 1
    assert np.exp(-nats).sum() == pytest.approx(1.0)


def test_datagen_text_is_the_stdlibs_sources_deterministic_and_split_by_file(tmp_path):
    """The same install gives the same bytes; every tenth file is held out; each file ends
    with a 0 byte; byte-level vocabulary 256 in uint16 files with a meta.json."""
    a = generate("text", tmp_path / "a", count=20)
    b = generate("text", tmp_path / "b", count=20, seed=7)  # no seed in a corpus
    for name in ("train.bin", "val.bin", "meta.json"):
        assert (a.root / name).read_bytes() == (b.root / name).read_bytes()
    files = TG.stdlib_sources()[:20]
    assert files == sorted(files) and all(f.suffix == ".py" for f in files)
    assert not any({"site-packages", "test"} & set(f.parts) for f in TG.stdlib_sources())
    meta = json.loads((a.root / "meta.json").read_text())
    assert meta["vocab_size"] == 256 and meta["dtype"] == "uint16"
    assert meta["files"] == {"train": 18, "val": 2}
    val = np.fromfile(a.root / "val.bin", dtype="<u2")
    expected = files[9].read_bytes() + b"\0" + files[19].read_bytes() + b"\0"
    assert val.tobytes() == np.frombuffer(expected, np.uint8).astype("<u2").tobytes()
    train = np.fromfile(a.root / "train.bin", dtype="<u2")
    assert len(train) == sum(f.stat().st_size + 1 for i, f in enumerate(files) if i % 10 != 9)
    assert a.unit == "tokens" and a.count == len(train) + len(val)


def test_datagen_text_refuses_an_image_size_and_too_few_files(tmp_path):
    with pytest.raises(ConfigError, match="--size"):
        generate("text", tmp_path / "s", count=20, size=(32, 32))
    with pytest.raises(ConfigError, match="at least 10 files"):
        generate("text", tmp_path / "c", count=5)


def test_text_without_a_folder_is_written_once_to_the_cache(tmp_path, monkeypatch):
    few = TG.stdlib_sources()[:12]
    monkeypatch.setattr(TG, "stdlib_sources", lambda root=None: few)
    folder = text_cache(tmp_path)
    assert (folder / ".complete").exists() and folder.parent == tmp_path
    stamp = (folder / "train.bin").stat().st_mtime_ns
    assert text_cache(tmp_path) == folder
    assert (folder / "train.bin").stat().st_mtime_ns == stamp  # reused, not rewritten
    cfg = C.build({"task": "lm", "dataset": "text", "cache_dir": str(tmp_path), "seq_len": 32})
    split = build_split(resolved_data(cfg))
    assert split.num_classes == 256 and str(folder) in split.source
