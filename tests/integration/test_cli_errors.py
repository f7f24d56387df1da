"""Every mistake a user can make is one clear line and exit code 2, never a traceback."""

import pytest

from scaleprobe.cli import main

pytestmark = pytest.mark.timeout(120)


def _err(capsys, *argv):
    code = main(list(map(str, argv)))
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.mark.parametrize("argv,needle", [
    (["run", "--model", "resnet35"], "unknown model 'resnet35'; did you mean"),
    (["run", "--dataset", "digitz"], "unknown dataset 'digitz'; did you mean digits"),
    (["run", "--batch-size", "0"], "batch size must be positive"),
    (["run", "--batch-size", "-1"], "batch size must be positive"),
    (["run", "--set", "train.batch_sise=3"], "unknown config key"),
    (["run", "--set", "nonsense"], "--set needs KEY=VALUE"),
    (["run", "--dataset", "cifar10"], "needs --data-dir"),
    (["run", "--dataset", "mnist", "--data-dir", "/nonexistent/dir"], "not found"),
    (["run", "--strategy", "dp"], "--strategy dp needs at least 2 CUDA devices"),
])
def test_bad_input_is_one_line(capsys, out_dir, argv, needle):
    import torch

    if "dp" in argv and torch.cuda.device_count() >= 2:
        pytest.skip("this host has the CUDA devices dp needs")
    code, err = _err(capsys, *argv, "--out", out_dir, "--no-progress")
    assert code == 2
    assert needle in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out_dir.exists()  # found before any run folder is made


def test_resnet35_suggests_resnet34(capsys):
    code, err = _err(capsys, "run", "--model", "resnet35")
    assert code == 2 and "resnet34" in err


def test_empty_data_dir(capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    code, err = _err(capsys, "run", "--dataset", "imagefolder", "--data-dir",
                     tmp_path / "empty", "--out", tmp_path / "o")
    assert code == 2 and "empty" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "o").exists()  # caught before any run folder is made


def test_corrupt_image_stops_the_run_or_is_skipped(capsys, tmp_path):
    from pathlib import Path

    from scaleprobe.data.formats import open_imagefolder, write_dataset
    from scaleprobe.results import read_jsonl

    root = write_dataset("imagefolder", tmp_path / "d", count=40, size=(32, 32))
    bads = [Path(open_imagefolder(root).samples[i][0]) for i in (3, 11, 19, 27, 35)]
    for bad in bads:
        bad.write_bytes(b"not an image")
    quick = ("--dataset", "imagefolder", "--data-dir", root, "--batch-size", 4, "--epochs", 1,
             "--warmup-steps", 1, "--loader", "naive", "--no-progress")
    code, err = _err(capsys, "run", *quick, "--out", tmp_path / "o1")
    assert code == 2 and any(str(bad) in err for bad in bads)
    assert len(err.splitlines()) == 1 and "Traceback" not in err

    code, err = _err(capsys, "run", *quick, "--skip-bad-samples", "--out", tmp_path / "o2")
    assert code == 0, err
    rec = read_jsonl(tmp_path / "o2" / "results.jsonl")[-1]
    assert rec["status"] == "ok"
    # one epoch visits every training sample once; the held-out split takes a few of the five
    assert 1 <= rec["metrics"]["bad_samples_skipped"] <= len(bads)


def test_unreadable_and_unknown_key_toml(capsys, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[train\nbatch_size=3")
    code, err = _err(capsys, "run", bad)
    assert code == 2 and "cannot parse" in err
    unk = tmp_path / "unk.toml"
    unk.write_text("[train]\nbatchsize = 3\n")
    code, err = _err(capsys, "run", unk)
    assert code == 2 and "unknown config key 'train.batchsize'" in err


def test_flags_override_the_file(tmp_path, capsys):
    from scaleprobe.cli import build_parser
    from scaleprobe.commands.options import config_from_args

    f = tmp_path / "exp.toml"
    f.write_text("batch_size = 16\nmodel = 'mlp'\n")
    args = build_parser().parse_args(["run", str(f), "--batch-size", "64",
                                      "--set", "train.momentum=0.5"])
    cfg = config_from_args(args)
    assert cfg.train.batch_size == 64 and cfg.model.name == "mlp"
    assert cfg.train.momentum == 0.5
