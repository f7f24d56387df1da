"""`scaleprobe predict --memory` on a hand-built record (no workers): figures by hand, every
flag refused in one line."""

import json
import math

import pytest

from scaleprobe.cli import main
from scaleprobe.core.result_model import RunResult
from tests.unit.predict.test_memmodel import facts


def _record(run_id="r1", strategy="single", world=1, state=None, **kw):
    return RunResult.from_dict({
        "kind": "run", "run_id": run_id, "status": "ok", "started_at": "2026-11-28T09:00:00Z",
        "config": {"model": {"name": "mlp"}, "dist": {"strategy": strategy, "nproc": world}},
        "batch": {"per_device": 32, "global": 32 * world, "world_size": world},
        "env": {"mem_total_bytes": 64 << 30, "gpus": [], "threads": 2 // world},
        "metrics": {"memory_facts": facts(strategy=strategy, world=world, **kw).to_dict(),
                    "step_time_s": {"median": 0.1}, "state_bytes": state}})


def _run(tmp_path, **kw):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "result.json").write_text(json.dumps(_record(**kw).to_dict()))
    return str(tmp_path / "r")


def test_check_sets_a_measured_fsdp_runs_peak_beside_its_prediction(tmp_path, capsys):
    # the 2-rank fsdp run, measured on the CPU: its rank's 2 MB of parameters + 4 MB of
    # AdamW state + the batch (3,200 B), then the probe's forward/backward peak above them:
    # 2 MB of gradients + the 400 kB unit twice + 1 kB x 32 + 50 kB = 2,882,000 B
    state = {"params_bytes": 2_000_000, "grads_bytes": 2_000_000,
             "optimizer_bytes": 4_000_000}
    two = _record("r2", "fsdp", 2, state, fwd_bwd_peak_bytes=[2_882_000, 2_866_000])
    for i, rec in enumerate((_record(), two)):
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "result.json").write_text(json.dumps(rec.to_dict()))
    assert main(["predict", "--check", str(tmp_path), "--json"]) == 0
    (pt,) = json.loads(capsys.readouterr().out)["points"]
    assert pt["measured_peak_bytes"] == 2_000_000 + 4_000_000 + 3_200 + 2_882_000
    # predicted: a half of 16 MB + 800 kB unit + 32 kB + 50 kB + 3,200 B of batch
    assert pt["predicted_peak_bytes"] == 8_000_000 + 800_000 + 32_000 + 50_000 + 3_200
    assert pt["memory_ratio"] == pytest.approx(1.0)
    assert pt["memory_base"] == "r1"
    # its interval: the 400 kB unit below, and (no second unit recorded) three times it above
    assert (pt["predicted_peak_low_bytes"], pt["predicted_peak_high_bytes"]) == (
        pt["predicted_peak_bytes"] - 400_000, pt["predicted_peak_bytes"] + 1_200_000)


def test_a_one_rank_fsdp_run_is_a_basis_of_last_resort_and_says_why(tmp_path, capsys):
    """A one-rank FSDP run's probe peak holds FSDP's unsharded buffers (here 800 kB more:
    its two largest units, the second not recorded), which the model takes out of the
    activations at the run's batch; its slope may still be off (the caveat): check predicts
    from the single run beside it, though the FSDP run is later, and from the FSDP run alone
    says so; so does ``--memory --from`` that run."""
    state = {"params_bytes": 2_000_000, "grads_bytes": 2_000_000,
             "optimizer_bytes": 4_000_000}
    two = _record("r2", "fsdp", 2, state, fwd_bwd_peak_bytes=[2_882_000, 2_866_000])
    fsdp1 = _record("f1", "fsdp", 1, fwd_bwd_peak_bytes=[4_882_000, 4_866_000, 4_858_000])
    fsdp1.started_at = "2026-11-28T09:05:00Z"
    for i, rec in enumerate((_record(), two, fsdp1)):
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "result.json").write_text(json.dumps(rec.to_dict()))
    assert main(["predict", "--check", str(tmp_path), "--json"]) == 0
    (pt,) = json.loads(capsys.readouterr().out)["points"]
    assert pt["memory_base"] == "r1" and pt["memory_caveat"] is None
    assert pt["memory_ratio"] == pytest.approx(1.0)
    (tmp_path / "0" / "result.json").unlink()  # the single run gone: the FSDP run, said
    assert main(["predict", "--check", str(tmp_path), "--json"]) == 0
    (pt,) = json.loads(capsys.readouterr().out)["points"]
    assert pt["memory_base"] == "f1" and "one-rank fsdp run" in pt["memory_caveat"]
    assert pt["memory_ratio"] == pytest.approx(1.0)  # the buffers taken out, at its batch
    assert main(["predict", "--check", str(tmp_path)]) == 0
    assert "caveat: predicted from a one-rank fsdp run" in capsys.readouterr().out
    assert main(["predict", "--from", str(tmp_path / "2"), "--memory"]) == 0
    assert "caveat: predicted from a one-rank fsdp run" in capsys.readouterr().out
    # from the 2-rank FSDP run, the caveat names its ranks (it said "one-rank" for any)
    assert main(["predict", "--from", str(tmp_path / "1"), "--memory"]) == 0
    assert "caveat: predicted from a 2-rank fsdp run" in capsys.readouterr().out


def test_check_table_fits_80_columns(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    state = {"params_bytes": 2_000_000, "grads_bytes": 2_000_000,
             "optimizer_bytes": 4_000_000}
    two = _record("r2", "fsdp", 2, state, fwd_bwd_peak_bytes=[2_882_000, 2_866_000, 2_858_000])
    other = _record("r3", "fsdp", 2, state)  # batch 32 per rank, no 1-rank run at 64:
    other.batch.per_device = 64
    for i, rec in enumerate((_record(), two, other)):
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "result.json").write_text(json.dumps(rec.to_dict()))
    assert main(["predict", "--check", str(tmp_path), "--memory"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(ln) for ln in lines) <= 80 and not any("\u2026" in ln for ln in lines)
    text = " ".join(" ".join(lines).split())
    # 8,885,200 B measured and predicted, 400 kB below, 1.2 MB above: 8.09 to 9.62 MiB
    assert "mlp fsdp 2 32 8.5 MiB 8.5 MiB 8.1-9.6 MiB 1.000" in text
    assert "measured inside the predicted interval: 1 of 1" in text
    assert "n/a (fsdp 2 x 64): no 1-rank run of the same model" in text


def test_json_points_parts_fits_and_largest_batch(tmp_path, capsys):
    run = _run(tmp_path)
    assert main(["predict", "--from", run, "--memory", "--batch-size", "64,1000",
                 "--nproc", "1,4", "--strategy", "ddp,fsdp", "--device-memory", "17000000",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    pts = {(p["strategy"], p["nproc"], p["batch_size"]): p for p in out["points"]}
    assert len(pts) == 8
    # ddp: 4 MB params + 4 MB grads + 8 MB AdamW + 4 MB buckets: over 17 MB at any batch
    d = pts[("ddp", 4, 64)]
    assert d["predicted_peak_bytes"] == 20_000_000 + 64_000 + 50_000 + 6_400
    assert d["predicted_peak_bytes"] == sum(d["parts"].values()) and d["fits"] is False
    # fsdp on 4: a quarter of 16 MB + the 400 kB unit twice + the step
    f = pts[("fsdp", 4, 1000)]
    assert f["predicted_peak_bytes"] == 4_000_000 + 800_000 + 1_000_000 + 50_000 + 100_000
    assert f["fits"] is True
    best = {(r["strategy"], r["nproc"]): (r["largest_batch_per_rank"],
                                          r["largest_batch_per_rank_point"])
            for r in out["largest_batch"]}
    assert best[("ddp", 1)] == (0, 0)
    # the point: (17e6 - 4.85e6) / 1100 B per sample = 11045; the interval's top holds three
    # more units (FSDP's collectives beside the step): (17e6 - 4.85e6 - 1.2e6) / 1100
    assert best[("fsdp", 4)] == (9954, 11045)


def test_table_names_fits_and_the_largest_batch(tmp_path, capsys):
    run = _run(tmp_path)
    assert main(["predict", "--from", run, "--memory", "--nproc", "4", "--strategy", "fsdp",
                 "--device-memory", "17000000"]) == 0
    out = capsys.readouterr().out
    assert "fits" in out
    # fits up to the interval's top (9,954); inconclusive up to its low end, one unit (U,
    # 400 kB) under the point: (17e6 - 4.85e6 + 0.4e6) / 1100 = 11,409, not the point's
    # 11,045 (bug: 11,046 to 11,409, whose interval still holds the device, went unsaid)
    assert ("largest batch per rank that fits: 9,954 (9,955 to 11,409: inconclusive)"
            in " ".join(out.split()))


# 1000 B per sample between batch 16 and 32, 750 B between 8 and 16: the slope grew 250 B
BENT = [4_082_000, 4_066_000, 4_060_000]


def _top(b):
    """The interval's top by hand, one rank, batch b > 32: 16 MB of state + 50 kB + 1100 B
    per sample (activations and the batch) + 250 B x 32 + the slope's growth beyond 32."""
    return 16_050_000 + 1100 * b + 8_000 + 250 * (b * math.log2(b / 16) - 32
                                                  - (b - 32) / math.log(2))


def test_interval_in_the_json_and_inconclusive_inside_it(tmp_path, capsys):
    run = _run(tmp_path, fwd_bwd_peak_bytes=BENT)
    assert main(["predict", "--from", run, "--memory", "--batch-size", "64,1000",
                 "--nproc", "1", "--strategy", "single", "--device-memory", "17200000",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    small, big = out["points"]
    assert big["predicted_peak_bytes"] == 16_000_000 + 1_100_000 + 50_000
    assert (big["predicted_peak_low_bytes"], big["predicted_peak_high_bytes"]) == (
        17_142_000, round(_top(1000)))
    # 17.2 MB lies inside [17.14, 18.29] MB
    assert big["fits"] is None and big["fit_verdict"] == "inconclusive"
    assert big["fit"]["rule"] == "interval includes the reference"
    assert small["fits"] is True and small["predicted_peak_high_bytes"] == round(_top(64))
    (row,) = out["largest_batch"]
    top = max(b for b in range(33, 1100) if _top(b) <= 17_200_000)
    # the point estimate: (17.2e6 - 16.05e6) / 1100 B per sample = 1045
    assert (row["largest_batch_per_rank"], row["largest_batch_per_rank_point"]) == (top, 1045)
    assert out["from"]["activations_slope_change_bytes"] == 250


def test_the_largest_batch_line_agrees_with_each_points_verdict(tmp_path, capsys):
    """Bug caught: "largest batch per rank that fits: 151 (152 to 190: inconclusive)" ended
    the inconclusive batches at the point estimate's largest, where 191 and 192 were
    inconclusive too. The range ends at the largest batch whose interval's low end is still
    under the device: each batch's own verdict agrees with the line, at both ends."""
    run = _run(tmp_path, fwd_bwd_peak_bytes=BENT)
    args = ["predict", "--from", run, "--memory", "--nproc", "2", "--strategy", "fsdp",
            "--device-memory", "17200000", "--json"]
    assert main(args) == 0
    (row,) = json.loads(capsys.readouterr().out)["largest_batch"]
    fits, upto, point = (row["largest_batch_per_rank"],
                         row["largest_batch_per_rank_low_end"],
                         row["largest_batch_per_rank_point"])
    assert 0 < fits < point < upto
    sizes = [fits, fits + 1, point, point + 1, upto, upto + 1]
    assert main([*args, "--batch-size", ",".join(map(str, sizes))]) == 0
    said = {p["batch_size"]: p["fit_verdict"]
            for p in json.loads(capsys.readouterr().out)["points"]}
    assert said == {fits: "fits", fits + 1: "inconclusive", point: "inconclusive",
                    point + 1: "inconclusive", upto: "inconclusive", upto + 1: "does not fit"}


def test_wide_figures_fit_80_columns(tmp_path, capsys, monkeypatch):
    """Every cell of 8 characters ("38.1 MiB"): 10 M parameters, 1 MB per sample."""
    monkeypatch.setenv("COLUMNS", "80")
    n = 10_000_000
    run = _run(tmp_path, param_count=n, param_numel_by_dtype={"float32": n},
               fwd_bwd_peak_bytes=[4 * n + 32_000_000, 4 * n + 16_000_000,
                                   4 * n + 7_900_000])
    assert main(["predict", "--from", run, "--memory", "--batch-size", "64,100",
                 "--nproc", "2,8", "--strategy", "ddp,fsdp", "--device-memory", "1GiB"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(ln) for ln in lines) <= 80, max(lines, key=len)
    assert not any("\u2026" in ln for ln in lines), [ln for ln in lines if "\u2026" in ln]
    assert any(ln.split()[:4] == ["ddp", "2", "64", "153"] and ln.split()[-1] == "fwd/bwd"
               for ln in lines)


def test_the_tables_fit_80_columns(tmp_path, capsys, monkeypatch):
    """The table was cut in an 80-column terminal; now two tables, none wider than 80."""
    monkeypatch.setenv("COLUMNS", "80")
    run = _run(tmp_path, fwd_bwd_peak_bytes=BENT)
    assert main(["predict", "--from", run, "--memory", "--batch-size", "64,1000,100000",
                 "--nproc", "1,8", "--strategy", "ddp,fsdp", "--device-memory",
                 "17800000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(ln) for ln in lines) <= 80, max(lines, key=len)
    # rich keeps a table inside the width by cutting cells: nothing may be cut
    assert not any("\u2026" in ln for ln in lines), [ln for ln in lines if "\u2026" in ln]
    rows = [ln.split() for ln in lines if ln.startswith(("ddp ", "fsdp "))]
    # each point in both tables, its verdict and its interval whole in the first
    assert len(rows) == 2 * 2 * 2 * 3
    fsdp1 = [r for r in rows if r[:3] == ["fsdp", "1", "1000"]][0]
    # fsdp on one rank holds its two largest units gathered (2 x 400 kB, the second not
    # recorded): 17.95 MB at batch 1000; its interval from none of them gathered (the root
    # alone: none here) to the top of the line's band + both units
    assert fsdp1[-1] == "inconclusive" and fsdp1[5:7] == ["16.3-18.2", "MiB"]
    text = " ".join(" ".join(lines).split())
    top = max(b for b in range(33, 1100) if _top(b) + 800_000 < 17_800_000)
    # inconclusive up to the interval's low end: the state, 50 kB + 1100 B per sample less
    # 250 B x 32, and no unit gathered: (17.8e6 - 16.05e6 + 8_000) / 1100 = 1,598 (the
    # point estimate's 863 is not where "does not fit" starts)
    assert (f"largest batch per rank that fits: {top} ({top + 1} to 1,598: inconclusive)"
            in text)


@pytest.mark.parametrize("argv,msg", [
    (["--memory"], "--memory needs --from RUN"),
    (["--from", "RUN", "--batch-size", "8"], "--batch-size needs --memory"),
    (["--from", "RUN", "--device-memory", "8GiB"], "--device-memory needs --memory"),
    (["--from", "RUN", "--memory", "--batch-size", "0"], "--batch-size must be at least 1"),
    (["--from", "RUN", "--memory", "--batch-size", "a"], "--batch-size takes numbers"),
    (["--from", "RUN", "--memory", "--device-memory", "lots"], "cannot read size 'lots'"),
    (["--from", "RUN", "--memory", "--strategy", "ps"], "no memory model for strategy 'ps'"),
    (["--from", "RUN", "--memory", "--link", "1gbit"], "--link does nothing with --memory"),
    (["--from", "RUN", "--memory", "--nnodes", "2"], "--nnodes does nothing with --memory"),
    (["--from", "RUN", "--memory", "--nproc", "0"], "--nproc must be at least 1"),
    (["--check", "RUN", "--memory", "--batch-size", "8"], "--batch-size does nothing with"),
])
def test_memory_mistakes_are_one_line(argv, msg, capsys, tmp_path):
    run = _run(tmp_path)
    assert main(["predict", *[run if a == "RUN" else a for a in argv]]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1


def test_a_run_without_memory_facts_is_one_line(tmp_path, capsys):
    run = _run(tmp_path, fwd_bwd_peak_bytes=None, batch_sizes=None)
    assert main(["predict", "--from", run, "--memory"]) == 2
    assert "recorded its memory facts" in capsys.readouterr().err


def test_a_fixed_part_below_zero_is_explained(tmp_path, capsys):
    """A peak reached before the gradients exist (gpt_tiny: at the end of forward) gives a
    fixed part below 0, the gradients' bytes taken from it; printed bare, a user read it as
    a bug. The header says why, and only when it is below 0."""
    run = _run(tmp_path, fwd_bwd_peak_bytes=[32_000, 16_000, 8_000])  # no gradients in it
    assert main(["predict", "--from", run, "--memory"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "fixed part -3.8 MiB (below 0: the step peaks before every gradient exists;" in out
    (tmp_path / "r" / "result.json").unlink()
    (tmp_path / "r").rmdir()
    assert main(["predict", "--from", _run(tmp_path), "--memory"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "fixed part 48.8 KiB (measured at batch" in out


def test_a_cpu_run_for_a_named_device_says_what_its_peak_leaves_out(tmp_path, capsys):
    """Bug caught: a run on the CPU, asked about an 80 GiB device, answered "fits" with a 0%
    allocator margin and no word that a GPU holds more than its tensors (its allocator's
    reserve, the CUDA context, the libraries' workspaces)."""
    run = _run(tmp_path)
    argv = ["predict", "--from", run, "--memory", "--nproc", "1", "--strategy", "ddp"]
    assert main([*argv, "--device-memory", "80GiB", "--json"]) == 0
    caveat = json.loads(capsys.readouterr().out)["from"]["device_caveat"]
    assert caveat.startswith("predicted from a run on the CPU") and "CUDA context" in caveat
    assert "this CPU's" not in caveat  # memory alone: no step times to speak of
    assert main([*argv, "--device-memory", "80GiB"]) == 0
    assert "caveat: predicted from a run on the CPU" in capsys.readouterr().out
    # the host's own memory (no device named): the prediction is for the CPU it ran on
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["from"]["device_caveat"] is None


def test_a_cuda_run_needs_no_device_caveat():
    from scaleprobe.commands.predict_memory import cpu_basis_caveat

    run = RunResult.from_dict({**_record().to_dict(), "metrics": {
        "memory_facts": facts(device="cuda:0").to_dict(), "step_time_s": {"median": 0.1}}})
    assert cpu_basis_caveat(run, True, steps=True) is None
    assert "this CPU's, not the GPU's" in cpu_basis_caveat(_record(), True, steps=True)


def test_the_largest_batch_line_names_one_inconclusive_batch_as_one():
    """``284 (285: inconclusive)``, never ``285 to 285``; a range where there is one."""
    from scaleprobe.commands.predict_memory import largest_text

    def got(b, up):
        return {"largest_batch_per_rank": b, "largest_batch_per_rank_low_end": up,
                "largest_batch_per_rank_point": b, "interval": True}

    assert largest_text(got(284, 285), short=True) == "284 (285: inconclusive)"
    assert largest_text(got(151, 192), short=True) == "151 (152 to 192: inconclusive)"
    assert largest_text(got(151, 151)) == "largest batch per rank that fits: 151"
