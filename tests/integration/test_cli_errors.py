"""Every mistake a user can make is one clear line and exit code 2, never a traceback."""

import pytest

from scaleprobe.cli import main
from scaleprobe.config.sections import RunConfig
from scaleprobe.core.errors import ConfigError

pytestmark = pytest.mark.timeout(120)


def named(rows: list) -> dict:
    """A table of command lines for parametrize, each row named by its command line (its id)."""
    return {"argvalues": rows, "ids": [" ".join(row[0]) for row in rows]}


def _err(capsys, *argv):
    code = main(list(map(str, argv)))
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.mark.parametrize("argv,needle", **named([
    (["run", "--model", "resnet35"], ("unknown model 'resnet35'; did you mean", "resnet34")),
    (["run", "--dataset", "digitz"], "unknown dataset 'digitz'; did you mean digits"),
    (["run", "--batch-size", "0"], "argument --batch-size: expected a whole number >= 1, got '0'"),
    (["run", "--batch-size", "-1"], "argument --batch-size: expected a whole number >= 1"),
    (["run", "--loader", "fast"], "argument --loader: expected one of naive, pipelined, got 'fast'"),
    (["run", "--momentum", "-0.1"], "argument --momentum: expected a number in [0, 1), got '-0.1'"),
    (["run", "--set", "train.momentum=1.5"], "--set train.momentum: expected a number in [0, 1)"),
    (["run", "--bogus"], "unrecognized arguments: --bogus"),
    (["run", "--set", "train.batch_sise=3"], "unknown config key"),
    (["run", "--set", "nonsense"], "--set needs KEY=VALUE"),
    (["run", "--dataset", "cifar10"], "needs --data-dir"),
    (["run", "--dataset", "mnist", "--data-dir", "/nonexistent/dir"], "not found"),
    (["run", "--strategy", "dp"], "--strategy dp needs at least 2 CUDA devices"),
    # bug caught: an lm run given the image default trained on text without a word
    (["run", "--task", "lm", "--dataset", "digits"], "--task lm reads tokens: --dataset "),
    (["run", "--task", "lm", "--model", "digits_cnn"], "--task lm trains a GPT decoder"),
    (["run", "--nproc", "2"], "--nproc 2 starts 2 processes: add --strategy ddp (or ps, "),
]))
def test_bad_input_is_one_line(capsys, out_dir, argv, needle):
    import torch

    if "dp" in argv and torch.cuda.device_count() >= 2:
        pytest.skip("this host has the CUDA devices dp needs")
    code, err = _err(capsys, *argv, "--out", out_dir, "--no-progress")
    assert code == 2
    assert all(n in err for n in ((needle,) if isinstance(needle, str) else needle)), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out_dir.exists()  # found before any run folder is made


def test_a_batch_over_the_data_is_one_line_and_recorded(capsys, out_dir):
    """The loader a rank trains from is checked as the run sets up (train/parts.no_full_batch;
    under DDP an epoch with no full batch spun without a step: tests/unit/train/
    test_no_full_batch.py): one line, exit 2, and the run recorded failed with it."""
    from scaleprobe.core.results import read_jsonl

    code, err = _err(capsys, "run", "--batch-size", "2048", "--out", out_dir, "--no-progress")
    line = ("the dataset has 1,438 samples, fewer than one batch of 2,048 per rank: lower "
            "--batch-size to 1,438 or less")
    assert code == 2 and err.endswith(line) and len(err.splitlines()) == 1, err
    (rec,) = read_jsonl(out_dir / "results.jsonl")
    assert rec["status"] == "failed" and line in rec["error"]


def test_empty_data_dir(capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    code, err = _err(capsys, "run", "--dataset", "imagefolder", "--data-dir",
                     tmp_path / "empty", "--out", tmp_path / "o")
    assert code == 2 and "empty" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "o").exists()  # caught before any run folder is made


def test_corrupt_image_stops_the_run_or_is_skipped(capsys, tmp_path):
    from pathlib import Path

    from scaleprobe.core.results import read_jsonl
    from scaleprobe.data.formats import open_imagefolder, write_dataset

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
    unk.write_text("learning_rate = 0.1\n")  # another tool's name: not near by spelling
    code, err = _err(capsys, "run", unk)
    assert code == 2 and err.endswith("unknown config key 'learning_rate'; did you mean lr?")


def test_report_reads_scaleprobe_out_by_default(capsys, tmp_path, monkeypatch,
                                                stop_before_work):
    """Bug caught: `scaleprobe report` insisted on a folder; run, sweep and demo write to
    scaleprobe-out when --out is left out, so that is where it looks."""
    monkeypatch.chdir(tmp_path)
    code, err = _err(capsys, "report")
    assert code == 2 and "no scaleprobe-out folder here" in err and "report DIR" in err
    (tmp_path / "scaleprobe-out").mkdir()
    assert main(["report"]) == 0  # reached the report's build


def test_torchs_no_cuda_runtime_note_is_kept_out(caplog):
    """Bug caught: "No CUDA runtime is found, using CUDA_HOME='/usr/local/cuda'" (torch, on a
    machine with a CUDA toolkit and no GPU) leaked into scaleprobe's output."""
    import logging

    import scaleprobe  # noqa: F401  (the filter is set on import)

    log = logging.getLogger("torch.utils.cpp_extension")
    with caplog.at_level(logging.WARNING):
        log.warning("No CUDA runtime is found, using CUDA_HOME='%s'", "/usr/local/cuda")
        log.warning("another warning")
    assert [r.getMessage() for r in caplog.records] == ["another warning"]


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


def _help(capsys, *argv):
    code = main([*argv, "--help"])
    return code, capsys.readouterr().out


def _entries(out):
    """--help text as {first option string: its whole entry on one line}."""
    entries, cur = {}, None
    for ln in out.splitlines():
        if ln.startswith("  -"):
            cur = ln.split()[0].rstrip(",")
            entries[cur] = ln.strip()
        elif cur and ln.startswith("    "):
            entries[cur] += " " + ln.strip()
        else:
            cur = None
    return entries


def test_run_help_shows_the_defaults_that_apply(capsys):
    """Bug: every flag was declared as a string with default None, so `run --help` showed no
    default at all (batch size, workers, lr, warm-up, timeout, the auto-stop caps)."""
    code, out = _help(capsys, "run")
    assert code == 0
    entries = _entries(out)
    for flag, shown in [("--batch-size", "64"), ("--workers", "2"), ("--lr", "0.05"),
                        ("--warmup-steps", "5"), ("--timeout", "30 s"), ("--max-steps", "200"),
                        ("--max-seconds", "120"), ("--min-steps", "10"), ("--steps", "auto"),
                        ("--loader", "pipelined"), ("--eval", "off")]:
        assert f"(default: {shown}" in entries[flag], entries[flag]
    assert "--optimizer {sgd,adamw}" in out and "--strategy {single,dp,ddp,ps,localsgd,fsdp}" in out
    assert "dist.calibration_steps" in out  # keys without a flag, with their defaults too
    assert "--nproc-per-node" in out


def test_help_defaults_follow_the_config_dataclass(capsys):
    """The defaults --help shows come from RunConfig's fields, not a second copy: every run
    flag shows the default of its key, so changing a dataclass default changes the help."""
    from scaleprobe.commands.options import RUN_FLAGS

    _, out = _help(capsys, "run")
    entries = _entries(out)
    cfg = RunConfig()
    for flag, key, _other in RUN_FLAGS:
        sec, _, name = key.rpartition(".")
        value = getattr(getattr(cfg, sec) if sec else cfg, name)
        if value is not None and not isinstance(value, bool):
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            assert f"(default: {shown}" in entries[flag], entries[flag]


def test_scale_help_shows_its_own_defaults(capsys):
    """scale runs ddp over 1,2 processes unless told otherwise; its help must not say
    `single` (the run default) or `1`."""
    entries = _entries(_help(capsys, "scale")[1])
    assert "(default: ddp)" in entries["--strategy"]
    assert "(default: 1,2)" in entries["--nproc"]


def test_a_flag_default_never_overrides_the_file(tmp_path):
    """A flag left out must leave the TOML file's value alone, whatever default --help shows
    for it; a flag given wins, and --no-FLAG turns a file's `true` off."""
    from scaleprobe.cli import build_parser
    from scaleprobe.commands.options import config_from_args

    f = tmp_path / "exp.toml"
    f.write_text("batch_size = 16\nworkers = 1\nlr = 0.2\neval = true\nprogress = false\n"
                 "[dist]\ntimeout_s = 7\nbackend = 'gloo'\n")
    cfg = config_from_args(build_parser().parse_args(["run", str(f)]))
    assert (cfg.train.batch_size, cfg.data.workers, cfg.train.lr, cfg.dist.timeout_s) == (
        16, 1, 0.2, 7.0)
    assert cfg.train.eval is True and cfg.measure.progress is False
    assert cfg.dist.backend == "gloo"
    cfg = config_from_args(build_parser().parse_args(
        ["run", str(f), "--no-eval", "--progress", "--workers", "3", "--backend", "none"]))
    assert cfg.train.eval is False and cfg.measure.progress is True and cfg.data.workers == 3
    assert cfg.dist.backend is None  # `none` given on the command line unsets the file's


def test_version(capsys):
    """`scaleprobe --version` prints the installed version (it was an unknown argument)."""
    import importlib.metadata

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"scaleprobe {importlib.metadata.version('scaleprobe')}")


@pytest.mark.parametrize("flag,counts", [("--nproc-per-node", [1, 2, 4]),
                                         ("--nproc_per_node", [1, 2])],
                         ids=["hyphens", "underscores"])
def test_nproc_per_node_is_torchrun_spelling_of_nproc(flag, counts):
    """People coming from torchrun type --nproc-per-node (or --nproc_per_node); it was an
    unknown argument."""
    from scaleprobe.cli import build_parser
    from scaleprobe.commands.options import config_from_args
    from scaleprobe.commands.scale import build_spec

    p = build_parser()
    cfg = config_from_args(p.parse_args(["run", "--strategy", "ddp", flag, "2"]))
    assert cfg.dist.nproc == 2
    spec, _out, _progress = build_spec(p.parse_args(["scale", flag, ",".join(map(str, counts))]))
    assert spec["grid"]["nproc"] == counts
    assert p.parse_args(["comm", flag, "3"]).nproc == 3


def test_threads_per_rank_is_a_flag_that_scale_holds_for_every_point():
    """--threads-per-rank sets dist.threads_per_rank; scale passes it to every point (the
    1-process baseline runs the N-process ranks' thread count, like for like)."""
    from scaleprobe.cli import build_parser
    from scaleprobe.commands.options import config_from_args
    from scaleprobe.commands.scale import build_spec

    p = build_parser()
    cfg = config_from_args(p.parse_args(["run", "--threads-per-rank", "1"]))
    assert cfg.dist.threads_per_rank == 1
    spec, _out, _progress = build_spec(p.parse_args(["scale", "--nproc", "1,2",
                                                     "--threads-per-rank", "1"]))
    base = spec.get("base", {})
    assert base.get("threads_per_rank", base.get("dist.threads_per_rank")) == 1, spec


@pytest.mark.parametrize("argv,needle", **named([
    (["rn"], "argument COMMAND: invalid choice: 'rn'"),
    (["sweep"], "the following arguments are required: SPEC.toml"),
    (["run", "--workers", "two"], "argument --workers: expected a whole number >= 0, got 'two'"),
    (["run", "--name", "a\nb"], "expected text without control characters"),
    # bug caught: the command's own help, and its nearest option or another tool's name for it
    (["run", "--batchsize", "3"], "scaleprobe run: error: unrecognized arguments: --batchsize; "
     "did you mean --batch-size? (see `scaleprobe run --help`)"),
    (["run", "--batch_size=3"], "did you mean --batch-size?"),
    (["run", "--learning-rate", "0.1"], "did you mean --lr?"),
    (["scale", "--num-workers", "2"], "did you mean --workers?"),
    (["run", "--bogus"], "unrecognized arguments: --bogus (see `scaleprobe run --help`)"),
]))
def test_usage_mistakes_are_one_line(capsys, argv, needle):
    """Bug: argparse printed its whole usage (24 lines for `run`) before the error."""
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


FRESH = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):  # an optional library not installed here
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {hidden!r}:
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, Hide())
from scaleprobe.cli import main
code = main(sys.argv[1:])
print('heavy imports:', sorted(m for m in ('torch', 'torchvision') if m in sys.modules),
      file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.parametrize("argv,hidden,needle", **named([
    (["run", "--model", "resnet35"], (), "unknown model 'resnet35'; did you mean"),
    (["run", "--dataset", "digitz"], (), "unknown dataset 'digitz'; did you mean digits"),
    (["run", "--task", "face", "--model", "resnt18"], (), "did you mean resnet18"),
    (["run", "--task", "detection", "--model", "resnet18", "--dataset", "voc"], (),
     "needs a detection model, not 'resnet18'"),
    (["run", "--task", "detection"], (), "needs a dataset with boxes"),
    (["run", "--task", "lm", "--model", "gpt_huge"], (), "trains a GPT decoder"),
    (["run", "--model", "no_such_file.py:build"], (), "model file not found"),
    (["run", "--task", "detection", "--dataset", "voc", "--data-dir", "DIR", "--eval"],
     ("torchmetrics",), "pip install 'scaleprobe[detection]'"),
    (["scale", "--nproc", "1,2", "--model", "resnet35"], (), "unknown model 'resnet35'"),
    (["worker", "--model", "resnet35"], (), "unknown model 'resnet35'"),
    (["sweep", "SPEC", "--dry-run"], (), "grid point model=resnet35: unknown model"),
]))
def test_names_and_extras_are_checked_before_torch_is_imported(tmp_path, argv, hidden, needle):
    """Bug: an unknown model name or a missing extra was reported after torch and torchvision
    were imported, ~200 s on a loaded machine. Found in a fresh interpreter: torch is not
    imported when the one-line error comes."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    spec = tmp_path / "s.toml"
    spec.write_text('[grid]\nmodel = ["resnet35"]\n')
    argv = [str(spec) if a == "SPEC" else str(tmp_path) if a == "DIR" else a for a in argv]
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-c", FRESH.format(hidden=set(hidden)), *argv,
                        "--out", str(tmp_path / "out")], capture_output=True, text=True,
                       env=env, timeout=100)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 2, p.stderr
    assert needle in lines[0] and lines[0].startswith("scaleprobe: error: "), lines[0]
    assert lines[1] == "heavy imports: []", p.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv,needle", **named([
    (["run", "--data-dir", "DIR"], "--dataset digits is built in and reads no folder"),
    (["run", "--dataset", "synthetic", "--data-dir", "DIR"], "--dataset synthetic is built in"),
    (["run", "--loss", "triplet"], "--loss triplet trains face embeddings: add --task face"),
    (["demo", "--repeats", "0"], "argument --repeats: expected a whole number >= 1, got '0'"),
    (["sweep", "SPEC", "--repeats", "-1"], "argument --repeats: expected a whole number >= 1"),
    (["run", "--parity", "--repeats", "0"], "argument --repeats: expected a whole number >= 1"),
    (["colocate", "SPEC", "--repeats", "x"], "argument --repeats: expected a whole number"),
]))
def test_options_that_do_not_apply_are_refused_before_anything_runs(capsys, tmp_path, argv,
                                                                      needle):
    """Bug: `--data-dir` with the built-in digits, `--loss triplet` without `--task face` and
    `demo --repeats 0` were accepted silently (the demo started measuring)."""
    spec = tmp_path / "s.toml"
    spec.write_text('[grid]\nbatch_size = [8]\n')
    argv = [str(spec) if a == "SPEC" else str(tmp_path) if a == "DIR" else a for a in argv]
    code, err = _err(capsys, *argv, "--out", tmp_path / "out")
    assert code == 2 and needle in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("dataset,argv,flags", [
    ("synthetic", ["--workers", "4"], "--workers does"),
    ("synthetic", ["--loader", "pipelined", "--prefetch", "4"], "--loader and --prefetch do "),
    ("tokens-synthetic", ["--workers", "1"], "use --dataset tokens or text"),
])
def test_loader_options_with_a_dataset_made_on_the_device_warn(capsys, dataset, argv, flags):
    """Bug: `--workers`/`--loader pipelined` with `--dataset synthetic` (no loader) were
    accepted silently. A warning, not an error: the run measures what it names."""
    from scaleprobe.cli import build_parser
    from scaleprobe.commands.options import config_from_args

    task = ["--task", "lm"] if dataset.startswith("tokens") else []
    cfg = config_from_args(build_parser().parse_args(["run", "--dataset", dataset, *task,
                                                      *argv]))
    err = capsys.readouterr().err.strip()
    assert cfg.data.dataset == dataset
    assert err.startswith("scaleprobe: warning: ") and flags in err, err
    assert "nothing with --dataset " + dataset in err and len(err.splitlines()) == 1
    config_from_args(build_parser().parse_args(["run", "--dataset", dataset, *task]))
    assert capsys.readouterr().err == ""  # the defaults alone: no warning


def test_a_grid_axis_that_changes_nothing_is_an_error_and_a_base_key_a_warning():
    from scaleprobe.experiments.spec import check_points, load_spec

    base = {"dataset": "synthetic", "model": "linear", "steps": 2}
    with pytest.raises(ConfigError, match="grid axis 'workers' changes nothing at workers=1: "
                       "--workers does nothing with --dataset synthetic"):
        check_points(load_spec({"base": base, "grid": {"workers": [1, 2]}}))
    sp = load_spec({"base": {**base, "workers": 3}, "grid": {"batch_size": [8, 16]}})
    assert len(check_points(sp)) == 2 and len(sp.unused) == 1
    assert "--workers does nothing" in sp.unused[0]
