"""torch.compile, measured without disturbing it: `run --compile` on a tiny model and a compiled
GPT script under `wrap`, each against the same thing eager. The `run --compile` test compiles
with inductor, the default (tens of seconds of code generation on the CPU); the others with
aot_eager, which goes through the same dynamo frames, guards, hooks and autograd graphs (what
recompiles, graph breaks and FLOPs depend on) without generating code."""

import pytest

from scaleprobe.core.results import read_jsonl
from tests.conftest import ROOT, run_cli

pytestmark = pytest.mark.timeout(900)
GPT = ROOT / "examples" / "scripts" / "gpt_compiled.py"
# a GPT small enough to compile in well under a minute on 2 cores
GPT_ARGS = ["--steps", "12", "--layers", "1", "--d", "32", "--heads", "2", "--seq", "32",
            "--batch-size", "8", "--tokens", "200000", "--warmup", "3", "--backend", "aot_eager"]


def _only(out):
    recs = read_jsonl(out / "results.jsonl")
    assert len(recs) == 1
    return recs[0]


def _run(out, *extra):
    p = run_cli("run", "--model", "mlp", "--dataset", "synthetic", "--image-size", 16,
                "--batch-size", 16, "--steps", 8, "--warmup-steps", 2, "--out", out,
                "--no-progress", *extra, timeout=800)
    assert p.returncode == 0, p.stderr[-3000:]
    return _only(out), p.stdout + p.stderr


@pytest.mark.slow  # two runs, one compiled: about a minute on the 2-core machine
def test_run_compile_reports_compile_time_apart_and_counts_flops(tmp_path):
    """Compile time measured (> 0) and outside the window, no recompile in it, the FLOPs of the
    compiled model equal to the eager run's count, and the summary says where the time went.
    Bugs caught: compiling inside the timed window (a warm-up that did not cover the
    backward), FLOPs "not counted" for compiled models, or a count that differs from eager;
    the evaluation run on the compiled model (a recompile for eval mode after the window)."""
    rec, text = _run(tmp_path / "c", "--compile", "--eval")  # evaluates the eager module
    eager, _ = _run(tmp_path / "e")
    m, why = rec["metrics"], rec["null_reasons"]
    assert rec["status"] == "ok", rec["error"]
    assert m["compile_time_s"] > 0 and m["compiles"] >= 1, why
    assert m["compiles_in_window"] == 0 and m["recompiles_in_window"] == 0
    assert m["recompiles"] == 0 and m["graph_breaks"] == 0
    assert {e["phase"] for e in rec["compile"]["events"]} == {"warm-up"}  # none after
    assert m["accuracy"] is not None
    assert {e["kind"] for e in rec["compile"]["events"]} >= {"dynamo"}
    assert rec["compile"]["mode"] == "default" and rec["compile"]["backend"] == "inductor"
    assert not [v for v in rec["invariants"] if v["name"] == "compile in window"]
    assert m["flops_per_step"] == eager["metrics"]["flops_per_step"] > 0
    assert m["mfu"] is not None
    assert "none inside the timed window" in text and "compile: " in text
    # against eager: 5 uncompiled passes after the window, each after a compiled one (a
    # pair: the same load on both), beside the window's 8 steps; the pairs cause no recompile
    vs = rec["compile"]["vs_eager"]
    assert vs["eager_passes"] == 5 and vs["compiled_steps"] == 8 and vs["fwd_bwd_speedup"] > 0
    assert vs["paired"] and vs["pairs"] == 5
    assert "compiled against eager: forward + backward" in text
    assert eager["metrics"]["compile_time_s"] is None
    assert eager["null_reasons"]["compile_time_s"] == "not compiled (add --compile)"


def _wrap(out, *args):
    p = run_cli("wrap", "--warmup-steps", 3, "--out", out, "--", GPT, *GPT_ARGS, *args,
                timeout=800)
    assert p.returncode == 0, p.stderr[-3000:]
    return _only(out), p.stdout + p.stderr


@pytest.mark.slow  # a compiled and an eager wrap of the GPT script: about a minute
def test_wrap_of_a_compiled_script_does_not_recompile_and_counts_flops(tmp_path):
    """The script compiles its model in its first step (warm-up) and never again: wrap's hooks
    cause no recompile (the cause of a compiled GPT-2 at 0.52x under wrap) and no graph break;
    its FLOPs are counted, the same as the eager script's; torch.compile's warning about
    global hooks, which are wrap's, is not printed into the script's output."""
    rec, text = _wrap(tmp_path / "c")
    eager, _ = _wrap(tmp_path / "e", "--no-compile")
    m = rec["metrics"]
    assert rec["status"] == "ok", rec["error"]
    assert m["compiles"] >= 1 and m["recompiles"] == 0 and m["graph_breaks"] == 0
    assert m["compiles_in_window"] == 0
    assert all(e["step"] == 0 for e in rec["compile"]["events"])  # all in the first step
    assert m["flops_per_step"] == eager["metrics"]["flops_per_step"] > 0
    assert m["mfu"] is not None
    assert "global hooks" not in text
    assert eager["metrics"]["compiles"] is None
    # its batches are token ids [8, 32]: tokens/s beside samples/s
    for r in (rec, eager):
        assert r["batch"]["tokens_per_sample"] == 32
        assert r["metrics"]["tokens_per_s"] == pytest.approx(r["metrics"]["samples_per_s"] * 32)
    assert "tokens/s" in text
    assert eager["null_reasons"]["compiles"] == "the script compiled nothing"


@pytest.mark.slow  # two ranks compiling a 2-block GPT on 2 cores: one to five minutes
def test_fsdp_lm_compile_on_two_ranks_counts_flops_and_compiles_outside_the_window(tmp_path):
    """--task lm --strategy fsdp --nproc 2 --compile (gloo on the CPU): the sharded model
    compiles in the warm-up on both ranks, nothing in the window, FSDP's collectives still
    measured in the step, and the FLOPs those of the whole model, 6N + 12 L d T per token
    (N = 2 x 12 x 32^2 + 256 x 32; 16 windows of 32 tokens per step over both ranks). Bugs
    caught: "not counted" (the fake count running FSDP's all-gather on fake tensors), a
    count of one rank's shard only, compiling inside the window."""
    p = run_cli("run", "--task", "lm", "--model", "gpt_tiny", "--layers", 2, "--width", 32,
                "--heads", 2, "--seq-len", 32, "--dataset", "tokens-synthetic",
                "--batch-size", 8, "--strategy", "fsdp", "--nproc", 2, "--compile",
                "--compile-backend", "aot_eager", "--steps", 6, "--warmup-steps", 2, "--out", tmp_path, "--no-progress",
                timeout=800)
    assert p.returncode == 0, p.stderr[-3000:]
    rec = _only(tmp_path)
    m = rec["metrics"]
    assert rec["status"] == "ok", rec["error"]
    assert m["compile_time_s"] > 0 and m["compiles"] >= 1, rec["null_reasons"]
    assert m["compiles_in_window"] == 0 and m["recompiles"] == 0
    assert rec["compile"]["backend"] == "aot_eager"
    n = 2 * 12 * 32 * 32 + 256 * 32
    assert m["flops_per_step"] == (6 * n + 12 * 2 * 32 * 32) * 16 * 32
    assert rec["comm"]["in_step"] is not None
