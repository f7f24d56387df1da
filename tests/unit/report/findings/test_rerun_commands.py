"""Every command the headline prints runs as printed: pasted into a shell, it is accepted
by scaleprobe's own parser and reaches the work (stubbed here) with exit code 0."""

from __future__ import annotations

import re
import shlex

import pytest

from scaleprobe import cli
from scaleprobe.report.reading import records as R
from scaleprobe.report.render.build_report import compose
from scaleprobe.report.render.doc import Table
from tests.unit.report.factory import parity_record, run, scale_point, sweep_point, write_results
from tests.unit.report.findings.test_headline import _batch


def _commands(tmp_path, recs: list[dict]) -> list[str]:
    """The backticked ``scaleprobe ...`` commands of the headline's rows."""
    write_results(tmp_path, recs)
    _, sections = compose(R.load_records(tmp_path), [tmp_path])
    out = []
    for block in sections[0].blocks:
        if isinstance(block, Table):
            for row in block.rows:
                for cell in row:
                    out += re.findall(r"`(scaleprobe [^`]+)`", cell)
    return out


def _runs(cmd: str) -> int:
    argv = shlex.split(cmd)
    assert argv[0] == "scaleprobe"
    return cli.main(argv[1:])


def _scale(eid: str, repeats: list[float], **kw) -> list[dict]:
    """A DDP scale over 1 and 2 processes with a noisy speedup (inconclusive)."""
    recs = []
    for i, k in enumerate(repeats):
        for n, sps in ((1, 100.0), (2, 150.0 * k)):
            exp = {**scale_point(eid, n), "repeat": i}
            recs.append(run(f"{eid}{n}r{i}", strategy="ddp", nproc=n, sps=sps, threads=1,
                            experiment=exp, **kw))
    return recs


def test_a_batch_verdicts_use_it_command_runs(tmp_path, stop_before_work):
    """Catches a "use it" command missing the run's task or data options or quoting a value
    the parser refuses."""
    recs = _batch("bs", [1.0, 1.02, 0.99], {16: 100.0, 32: 52.0})
    for r in recs:
        r["config"]["data"].update(dataset="cifar10", data_dir=str(tmp_path / "my data"))
    cmds = _commands(tmp_path / "out", recs)
    use = [c for c in cmds if c.startswith("scaleprobe run")]
    assert use, cmds
    assert "--set train.batch_size=32" in use[0]
    assert "data.data_dir=" in use[0] or "--data-dir" in use[0]
    for c in use:
        assert _runs(c) == 0, c


def test_a_scale_rerun_command_runs_with_its_counts_and_options(tmp_path, stop_before_work):
    """Catches a rerun command for a scale that drops the process counts, the strategy or the
    threads per rank, or that the parser refuses."""
    recs = _scale("sc", [0.7, 1.3])
    for r in recs:
        r["config"]["dist"]["threads_per_rank"] = 1
    cmds = [c for c in _commands(tmp_path / "out", recs) if c.startswith("scaleprobe scale")]
    assert cmds, "no scale command in the headline"
    cmd = cmds[0]
    assert "--nproc 1,2" in cmd and "--id sc" in cmd and "--repeats" in cmd
    assert "--strategy ddp" in cmd or "dist.strategy=ddp" in cmd
    assert _runs(cmd) == 0, cmd


def test_a_target_scales_rerun_command_starts_from_the_experiments_own_seed(
        tmp_path, stop_before_work):
    """Bug caught: under --target each repeat trains with seed + repeat; the command was
    read off the row's median repeat (seed 2), so `--repeats 6` would have trained seeds
    2-7 beside the experiment's 0-2 instead of adding 3-5."""
    recs = _scale("tt", [0.7, 1.3, 1.0])
    for r in recs:
        i = r["experiment"]["repeat"]
        r["config"]["train"].update(target="accuracy=0.8", seed=i, max_epochs=4)
        r["metrics"]["samples_per_s"] += i if r["config"]["dist"]["nproc"] == 1 else 0
    cmds = [c for c in _commands(tmp_path / "out", recs) if c.startswith("scaleprobe scale")]
    assert cmds, "no scale command in the headline"
    assert "train.seed" not in cmds[0] or "train.seed=0" in cmds[0], cmds[0]
    assert "accuracy=0.8" in cmds[0]
    assert _runs(cmds[0]) == 0, cmds[0]


def test_a_parity_command_runs_with_the_n_process_sides_options(tmp_path, stop_before_work):
    """Catches a parity command without the runs' options (a 1-process parity of another
    model) or one the parser refuses."""
    rec = parity_record()
    rec["verdict"] = "inconclusive"
    rec["difference_interval"].update(lo=-0.03, hi=0.01)
    one = run("p1", model="mlp", dataset="digits", strategy="ddp", nproc=1,
              experiment=sweep_point("parity-runs"))
    two = run("p2", model="mlp", dataset="digits", strategy="ddp", nproc=2,
              experiment=sweep_point("parity-runs"))
    two["config"]["train"]["seed"] = 0
    rec["runs"] = [one["run_id"], two["run_id"]]
    cmds = [c for c in _commands(tmp_path / "out", [one, two, rec]) if "--parity" in c]
    assert cmds, "no parity command in the headline"
    cmd = cmds[0]
    assert "model.name=mlp" in cmd and "--parity-tolerance 0.02" in cmd
    assert _runs(cmd) == 0, cmd


@pytest.mark.parametrize(("workers", "pick"), [((0, 2), 2), ((0, 1, 2), 1)])
def test_a_worker_verdicts_command_runs(tmp_path, stop_before_work, workers, pick):
    """Catches a "use N workers" command with a loader option the parser refuses (workers
    with the naive loader, a prefetch of none...); 1 and 2 workers tie, so the fewer is
    the one to use."""
    recs = []
    for i in range(3):
        for w in workers:
            recs.append(run(f"w{w}r{i}", workers=w, loader="naive" if w == 0 else "pipelined",
                            transform="heavy", dataset="jpeg-synth", cores=2,
                            sps=(60.0 if w == 0 else 120.0 + w) * (1 + 0.01 * i),
                            experiment={**sweep_point("loader", workers=w), "repeat": i}))
    cmds = [c for c in _commands(tmp_path / "out", recs) if c.startswith("scaleprobe run")]
    assert cmds, "no worker command in the headline"
    assert f"data.workers={pick}" in cmds[0], cmds[0]
    for c in cmds:
        assert _runs(c) == 0, c


@pytest.mark.parametrize("fmt", ["cifar10", "mnist", "imagefolder", "voc", "lfw", "text"])
def test_each_datagen_use_it_command_runs(tmp_path, stop_before_work, fmt):
    """Catches a "use it" line without the task its data needs (``--dataset voc`` without
    ``--task detection`` failed in the loader with a raw collate error) or with a flag the
    parser refuses."""
    from scaleprobe.commands.datagen import use_command

    cmd = use_command(fmt, tmp_path / "my data")
    assert _runs(cmd) == 0, cmd
    want = {"voc": "--task detection", "lfw": "--task face", "text": "--task lm"}.get(fmt)
    assert want is None or want in cmd


def test_a_box_dataset_without_the_detection_task_is_one_line(tmp_path, capsys):
    """Catches ``--dataset voc`` under the classification task reaching the loader."""
    rc = cli.main(["run", "--dataset", "voc", "--data-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "--task detection" in err and "Traceback" not in err


def test_every_rerun_command_parses_with_scaleprobes_own_parser(tmp_path):
    """Each command report/findings/rerun.py prints (a sweep's, a co-location's and the demo's rerun,
    a scale's, a run with a pick's settings, a parity run) is accepted by
    ``cli.build_parser().parse_args``: a wrong flag fails here without training."""
    from scaleprobe.core.result_model import RunResult
    from scaleprobe.report.findings import rerun as RC

    spec = tmp_path / "my spec.toml"
    sc = [RunResult.from_dict(r) for r in _scale("sc", [0.7, 1.3])]
    one = RunResult.from_dict(run("p", model="mlp", dataset="digits", strategy="ddp", nproc=2))
    printed = [RC.rerun("sweep", "bs", str(tmp_path / "out"), 5, str(spec)),
               RC.rerun("colocate", "co", str(tmp_path / "out"), 3, str(spec)),
               RC.rerun("sweep", "demo-batch-size", str(tmp_path / "demo" / "sweeps"), 3),
               RC.rerun("sweep", "demo-loader-transform", "", None),
               RC.rerun("scale", "sc", str(tmp_path / "out"), 4, runs=sc),
               RC.run_command(one, {"batch_size": 64, "workers": None}),
               RC.parity_command(parity_record_typed(), {}, 3)]
    parser = cli.build_parser()
    for p in printed:
        got = re.findall(r"`(scaleprobe [^`]+)`", p)
        assert got, p
        argv = shlex.split(got[0])
        assert argv[0] == "scaleprobe"
        parser.parse_args(argv[1:])  # SystemExit (exit 2) on a flag it does not know


def parity_record_typed():
    from scaleprobe.core.experiment_records import ParityRecord
    from tests.unit.report.factory import loaded

    rec = loaded(parity_record())
    assert isinstance(rec, ParityRecord)
    return rec


def test_the_datagen_commands_its_help_and_its_hints_print_parse():
    """The usage lines of ``scaleprobe datagen`` (its help) and the hint a missing data
    folder prints (``generate a small one with `scaleprobe datagen FMT --out DIR```) are
    accepted by scaleprobe's own parser, for every format."""
    from scaleprobe.commands import datagen
    from scaleprobe.data.formats import FORMATS
    from scaleprobe.data.formats.common import hint

    parser = cli.build_parser()
    usage = [ln.split("#")[0].strip() for ln in (datagen.__doc__ or "").splitlines()
             if ln.strip().startswith("scaleprobe datagen")]
    assert len(usage) == 6
    hints = [re.findall(r"`(scaleprobe [^`]+)`", hint(f))[0] for f in FORMATS]
    for cmd in usage + hints:
        parser.parse_args(shlex.split(cmd)[1:])
