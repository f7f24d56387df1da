"""`scaleprobe predict` and the comm command's validation, in-process (no workers)."""

import json

import pytest

from scaleprobe.cli import main
from scaleprobe.core.errors import ConfigError


def test_predict_json_closed_form(capsys):
    assert main(["predict", "--params", "1e6", "--nproc", "4", "--link", "1gbit",
                 "--compute-time", "0.4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["inputs"]["params"] == 1_000_000
    preds = {p["strategy"]: p for p in out["predictions"]}
    assert set(preds) == {"allreduce", "ps", "localsgd", "fsdp"}
    # 4e6 bytes, n = 4, 1 Gbit/s = 1.25e8 B/s, 50 us per hop
    assert preds["allreduce"]["comm_s"] == pytest.approx(6 * 50e-6 + 1.5 * 4e6 / 1.25e8)
    assert preds["fsdp"]["comm_s"] == pytest.approx(9 * 50e-6 + 2.25 * 4e6 / 1.25e8)
    assert preds["allreduce"]["efficiency"] == pytest.approx(0.4 / (0.4 + 0.0483))
    assert preds["localsgd"]["average_every"] == 4


def test_predict_closed_form_answers_a_million_processes(capsys):
    """The closed form has no per-rank work: 1e8 processes answer at once (the step model
    refuses beyond its cap and names this one)."""
    assert main(["predict", "--params", "1e6", "--nproc", "100000000", "--compute-time", "0.1",
                 "--target", "90%", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["predictions"][0]["world_size"] == 100_000_000
    assert out["predictions"][0]["target_efficiency"] == 0.9


def test_predict_table(capsys):
    assert main(["predict", "--params", "25e6", "--nproc", "2", "--nnodes", "2",
                 "--compute-time", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "10gbit" in out and "allreduce" in out and "Gbit/s" in out


@pytest.mark.parametrize("argv,msg", [
    (["predict", "--nproc", "2"], "give the model size"),
    (["predict", "--params", "1e6", "--nproc", "2", "--link", "fast"], "unknown link"),
    (["predict", "--params", "1e6", "--nproc", "0"], "at least 1"),
    (["predict", "--nproc", "2", "--from", "/nonexistent.json"], "no such file"),
    (["predict", "--params", "1e6", "--nproc", "2", "--compute-time", "-1"],
     "argument --compute-time: expected a number in (0, "),
    # bug caught: every flag in range and read by the mode asked for
    (["predict", "--params", "1e6", "--nproc", "2", "--compute-time", "nan"],
     "argument --compute-time: expected a number in (0, "),
    (["predict", "--params", "nan", "--nproc", "2"], "argument --params: expected a number"),
    (["predict", "--params", "1e6", "--nproc", "2", "--alpha-us", "-100"],
     "argument --alpha-us: expected a number in [0, "),
    (["predict", "--params", "1e6", "--nproc", "2", "--alpha-us", "1e309"],
     "argument --alpha-us: expected a number in [0, "),
    (["predict", "--nproc", "2", "--from", "RUN", "--alpha-us", "50000"],
     "--alpha-us does nothing with --from: write the latency into the link"),
    (["predict", "--nproc", "2", "--from", "RUN", "--overlap", "0.5"],
     "--overlap does nothing with --from"),
    (["predict", "--nproc", "2", "--from", "RUN", "--params", "1e6"],
     "--params does nothing with --from"),
    (["predict", "--check", "RUN", "--nproc", "2"], "--nproc does nothing with --check"),
    (["predict", "--check", "RUN", "--target", "0.5"], "--target does nothing with --check"),
    (["predict", "--check", "RUN", "--from", "RUN"], "--check and --from ask two questions"),
    (["predict", "--params", "1e6", "--nproc", "2", "--compute-time", "1", "--target", "7"],
     "argument --target: expected an efficiency in (0, 1] or a percent such as 90%, got '7'"),
    (["predict", "--params", "1e6", "--nproc", "2", "--compute-time", "1", "--target", "0"],
     "argument --target: expected an efficiency in (0, 1]"),
    (["predict", "--params", "1e6", "--nproc", "2", "--target", "0.5"],
     "--target needs --compute-time"),
    (["predict", "--params", "1e6", "--nproc", "2", "--compute-time", "1", "--overlap", "2"],
     "argument --overlap: expected a number in [0, 1], got '2'"),
    (["predict", "--params", "1e6", "--nproc", "2", "--overlap", "0.5"],
     "--overlap needs --compute-time"),
    (["predict", "--params", "1e6", "--nproc", "2", "--link", ""], "--link is empty"),
    (["predict", "--params", "1e6", "--nproc", "2", "--link", "1gbit,rank9=100mbit"],
     "--link names rank 9, but 2 processes have ranks 0..1"),
    (["predict", "--nproc", "2", "--from", "RUN", "--link", "1gbit,rank9=100mbit"],
     "--link names rank 9, but 2 processes have ranks 0..1"),
    (["predict", "--nproc", "100000000", "--from", "RUN"],
     "100,000,000 processes (--nproc x --nnodes): the step model lays out every rank's"),
    (["predict", "--nproc", "1000000", "--from", "RUN", "--link", "1gbit"],
     "answers ddp up to 128 processes in seconds; for more, the closed-form model"),
    (["predict", "--nproc", "64", "--from", "RUN", "--strategy", "ps"],
     "answers ps up to 32 processes"),
    (["predict", "--model", "resnet18", "--nproc", "2", "--num-classes", "0"],
     "argument --num-classes: expected a whole number >= 1"),
    (["comm", "--nproc", "1"], "at least 2 processes"),
    (["comm", "--sizes", "1Q"], "cannot read message size"),
    (["comm", "--ops", "allgather"], "did you mean all_gather"),
    (["comm", "--nnodes", "2", "--nproc", "1"], "rdzv-endpoint"),
    (["comm", "--nnodes", "2", "--executor", "slurm", "--rdzv-endpoint", "h:1"],
     "--executor slurm places the hosts itself"),
    (["comm", "--partition", "gpu"], "--partition is a Slurm option"),
])
def test_user_mistakes_are_one_line(argv, msg, capsys, tmp_path):
    if "RUN" in argv:  # a one-rank run's record: refused before it is simulated
        from tests.unit.predict.test_stepmodel import THIRDS, one_rank_run

        rec = one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 4, THIRDS)
        (tmp_path / "r" / "result.json").write_text(json.dumps(rec.to_dict()))
        argv = [str(tmp_path / "r") if a == "RUN" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1


def test_predict_from_a_run_that_did_not_finish_says_so(capsys, tmp_path):
    """`predict --from RUN` on a one-rank run interrupted by Ctrl+C. Bug caught: "no measured
    one-rank run ... --from takes a run of one process" for a run of one process."""
    from tests.unit.predict.test_stepmodel import THIRDS, one_rank_run

    rec = one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 4, THIRDS)
    rec.status = "interrupted"
    (tmp_path / "r" / "result.json").write_text(json.dumps(rec.to_dict()))
    assert main(["predict", "--from", str(tmp_path / "r"), "--nproc", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "(it holds runs that did not finish: interrupted)" in err, err
    assert len(err.splitlines()) == 1


def test_a_gpu_run_asked_for_several_gpus_on_one_host_needs_the_link(capsys, tmp_path):
    """A run on a GPU: the default link on one host (loopback, CPU processes over gloo) would
    price GPU-to-GPU collectives as a CPU's. Refused in one line naming --link; given a link,
    one device, or several hosts (10gbit between them), it predicts."""
    from scaleprobe.predict.whatif import check_gpu_link
    from tests.unit.predict.test_stepmodel import THIRDS, one_rank_run

    rec = one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 4, THIRDS).to_dict()
    rec["env"]["cuda_available"] = True
    (tmp_path / "r" / "result.json").write_text(json.dumps(rec))
    run = str(tmp_path / "r")
    assert main(["predict", "--from", run, "--nproc", "1,2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "the link between the GPUs of one host is not known" in err and "--link" in err
    assert len(err.splitlines()) == 1
    for ok in (["--nproc", "2", "--link", "nvlink"], ["--nproc", "1"],
               ["--nproc", "2", "--nnodes", "2"]):
        assert main(["predict", "--from", run, "--json", *ok]) == 0, ok
        capsys.readouterr()
    check_gpu_link(False, [None], [1], [8])  # the CPU's own loopback: measured, fine
    with pytest.raises(ConfigError):
        check_gpu_link(True, ["nvlink", None], [1], [2])  # one of the links left out


def test_a_fit_measured_under_load_is_said_with_every_prediction_it_prices():
    """A comm record whose ``load`` is flagged gives a link with a caveat, carried into the
    notes of a multi-rank prediction; a quiet record's (or an older one's, without ``load``)
    carries none."""
    from scaleprobe.features.links import UNDER_LOAD_HEAD, link_from_comm

    fit = {"all_reduce": {"alpha_s": 1e-4, "beta_s_per_byte": 8e-9, "max_rel_err": 0.05}}
    rec = {"kind": "comm", "world_size": 2, "backend": "gloo", "fit": fit}
    assert link_from_comm(rec, "OUT").caveat == ""
    quiet = {**rec, "load": {"flag": False, "reason": None, "outside_cpu_cores": 0.01}}
    assert link_from_comm(quiet, "OUT").caveat == ""
    loaded = {**rec, "load": {"flag": True, "outside_cpu_cores": 0.9,
                              "reason": "processes outside the run used 0.90 cores"}}
    link = link_from_comm(loaded, "OUT")
    assert link.caveat.startswith(UNDER_LOAD_HEAD + "OUT) was measured under load: "
                                  "processes outside the run used 0.90 cores")
    from scaleprobe.predict import stepmodel as M
    from scaleprobe.predict.sample import RunSample
    from scaleprobe.predict.timeline import Bucket, Compute

    def sample():
        return RunSample(label="r", strategy="ddp", world=1, threads=1, grad_bytes=4e6,
                         rows=[Compute(0.0, 0.0, 0.01, 0.02, 0.001)] * 8, rows_source="t",
                         buckets=[Bucket(4e6, 1.0, 0.0)], pass_s_per_byte=None,
                         fresh_s_per_byte=None, step_median_s=0.031, started_at=None)

    pred = M.predict(sample(), M.Scenario("ddp", 1, 2, link), replicates=5)
    assert link.caveat in pred.notes
    calm = M.predict(sample(), M.Scenario("ddp", 1, 2, link_from_comm(quiet, "OUT")),
                     replicates=5)
    assert not [n for n in calm.notes if n.startswith(UNDER_LOAD_HEAD)]
