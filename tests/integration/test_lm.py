"""--task lm through the CLI: GPT decoders on device-resident random tokens, on the standard
library's text (datagen text), under DDP with 2 processes, and trained until the held-out
loss is below the context-free baseline on the held-out tokens."""

import json
import math

import pytest

from scaleprobe.core.results import read_jsonl
from tests.conftest import run_cli

pytestmark = pytest.mark.timeout(300)
TINY = ["--layers", 2, "--width", 64, "--heads", 2, "--seq-len", 32]


def _one(out):
    recs = read_jsonl(out / "results.jsonl")
    assert len(recs) == 1
    return recs[0]


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory):
    """The first 40 files of the standard library's sources as token files."""
    d = tmp_path_factory.mktemp("text") / "corpus"
    p = run_cli("datagen", "text", "--out", d, "--count", 40, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "use it: scaleprobe run --task lm --dataset text --data-dir" in p.stdout
    return d


def test_lm_on_random_tokens_records_tokens_per_s_flops_and_a_loss_near_ln_v(tmp_path):
    """Random tokens on the device: tokens/s = samples/s x seq_len, the FLOPs of the step
    are 6N + 12 L d T per token exactly (attention counted on the CPU), and the held-out loss
    of random tokens is about ln(vocab) (the model cannot beat chance on them)."""
    out = tmp_path / "out"
    p = run_cli("run", "--task", "lm", "--dataset", "tokens-synthetic", *TINY,
                "--batch-size", 8, "--steps", 4, "--warmup-steps", 1, "--eval",
                "--set", "data.vocab_size=128", "--out", out, "--no-progress")
    assert p.returncode == 0, p.stderr[-2000:]
    rec = _one(out)
    m = rec["metrics"]
    assert rec["status"] == "ok" and rec["input_mode"] == "device-resident"
    assert rec["config"]["model"]["name"] == "gpt_tiny"
    assert rec["batch"]["tokens_per_sample"] == 32
    assert m["tokens_per_s"] == pytest.approx(m["samples_per_s"] * 32)
    L, d, T, V, B = 2, 64, 32, 128, 8
    N = 12 * L * d * d + V * d  # the blocks' Linear weights + the tied head
    assert m["flops_per_step"] == (6 * N + 12 * L * d * T) * B * T
    assert 0 < m["mfu"] < 1
    assert m["unigram_entropy_nats"] == pytest.approx(math.log(V))
    assert abs(m["loss"] - math.log(V)) < 0.3, m["loss"]
    assert m["perplexity"] == pytest.approx(math.exp(m["loss"]))
    assert rec["resolved"]["data.vocab_size"] == V and rec["resolved"]["model.width"] == d
    assert "tokens/s" in p.stdout and "FLOPs:" in p.stdout and "MFU" in p.stdout
    # random tokens: the context-free baseline is ln V on every token, exactly
    assert m["baseline_loss"] == pytest.approx(math.log(V))
    assert "context-free baseline 4.852 on the same tokens" in " ".join(p.stdout.split())


def test_lm_on_text_reads_the_token_files_through_the_loader(tmp_path, text_dir):
    out = tmp_path / "out"
    p = run_cli("run", "--task", "lm", "--dataset", "text", "--data-dir", text_dir, *TINY,
                "--batch-size", 8, "--steps", 3, "--warmup-steps", 1, "--eval",
                "--loader", "naive", "--out", out, "--no-progress")
    assert p.returncode == 0, p.stderr[-2000:]
    rec = _one(out)
    m = rec["metrics"]
    meta = json.loads((text_dir / "meta.json").read_text())
    assert rec["input_mode"] == "loader" and str(text_dir) in rec["dataset_source"]
    assert m["steps_done"] == 4
    assert rec["resolved"]["data.vocab_size"] == 256
    # python source: far from uniform over 256 bytes, well above 0
    assert 2.0 < m["unigram_entropy_nats"] < math.log(256) - 1
    assert m["eval_tokens"] == min(256, (meta["tokens"]["val"] - 1) // 32) * 32  # eval_windows
    assert math.isfinite(m["loss"]) and m["tokens_per_s"] > 0
    # the context-free baseline by hand: the evaluated windows' target tokens, each costing
    # -ln((c + 1) / (N + 256)) under the training split's counts c (N tokens)
    import numpy as np

    train = np.fromfile(text_dir / "train.bin", dtype="<u2")
    val = np.fromfile(text_dir / "val.bin", dtype="<u2")
    c = np.bincount(train, minlength=256).astype(float)
    count = (len(val) - 1) // 32
    k = min(256, count)
    picks = range(count) if k == count else [round(j * (count - 1) / 255) for j in range(256)]
    targets = np.concatenate([val[w * 32 + 1: w * 32 + 33] for w in picks])
    by_hand = float(np.mean(-np.log((c[targets] + 1) / (len(train) + 256))))
    assert m["baseline_loss"] == pytest.approx(by_hand, rel=1e-9)
    assert m["baseline_windows"] == k
    assert m["baseline_margin"] == pytest.approx(by_hand - m["loss"], rel=1e-9)


USER_LM = """
from torch import nn

def lm(vocab_size, seq_len):
    assert seq_len == 16
    return nn.Sequential(nn.Embedding(vocab_size, 32), nn.Linear(32, vocab_size))
"""


def test_a_users_own_language_model_trains_with_tokens_per_s_flops_and_held_out_loss(tmp_path):
    """--task lm --model FILE.py:FUNC: the builder gets the vocabulary and the sequence length;
    tokens/s, FLOPs counted from the module (an embedding, then one Linear 32 -> 100: 6 x 32 x
    100 FLOPs per token), the held-out loss against the context-free baseline (ln 100 on
    random tokens)."""
    f = tmp_path / "mine.py"
    f.write_text(USER_LM)
    out = tmp_path / "out"
    p = run_cli("run", "--task", "lm", "--model", f"{f}:lm", "--seq-len", 16, "--dataset",
                "tokens-synthetic", "--set", "data.vocab_size=100", "--batch-size", 4,
                "--steps", 3, "--warmup-steps", 1, "--eval", "--out", out, "--no-progress")
    assert p.returncode == 0, p.stderr[-2000:]
    rec = _one(out)
    m = rec["metrics"]
    assert rec["status"] == "ok" and rec["batch"]["tokens_per_sample"] == 16
    assert m["tokens_per_s"] == pytest.approx(m["samples_per_s"] * 16)
    assert m["flops_per_step"] == 6 * 32 * 100 * 4 * 16
    assert math.isfinite(m["loss"]) and m["baseline_loss"] == pytest.approx(math.log(100))
    assert rec["config"]["train"]["optimizer"] == "adamw"  # lm's default
    assert "held-out loss" in p.stdout and "tokens/s" in p.stdout


def test_a_missing_token_folder_is_one_line_exit_2(tmp_path):
    p = run_cli("run", "--task", "lm", "--dataset", "tokens", "--data-dir", tmp_path / "none",
                "--out", tmp_path / "out", "--no-progress", timeout=120)
    assert p.returncode == 2
    assert "not found" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.slow
def test_lm_under_ddp_with_two_processes_shards_the_windows(tmp_path):
    """Each rank reads its own windows (DistributedSampler over the window indices), every
    window of an epoch is read, the order changes between epochs: the shard audit holds over
    two whole epochs of a small token folder (62 windows: 3 batches of 8 per rank and
    epoch), and the job's tokens/s is the global batch's."""
    import numpy as np

    data = tmp_path / "tokens"
    data.mkdir()
    rng = np.random.default_rng(0)
    rng.integers(0, 500, 2000).astype("<u2").tofile(data / "train.bin")
    rng.integers(0, 500, 200).astype("<u2").tofile(data / "val.bin")
    (data / "meta.json").write_text('{"vocab_size": 500, "dtype": "uint16"}')
    out = tmp_path / "out"
    p = run_cli("run", "--task", "lm", "--dataset", "tokens", "--data-dir", data, *TINY,
                "--strategy", "ddp", "--nproc", 2, "--epochs", 2, "--batch-size", 8,
                "--warmup-steps", 1, "--loader", "naive", "--out", out, "--no-progress")
    assert p.returncode == 0, p.stderr[-2000:]
    rec = _one(out)
    assert rec["status"] == "ok" and rec["batch"]["global"] == 16
    assert rec["metrics"]["steps_done"] == 6 and rec["resolved"]["data.vocab_size"] == 500
    assert rec["audit"]["ok"] is True, rec["audit"]
    assert rec["audit"]["same_order_across_epochs"] is False
    assert rec["metrics"]["tokens_per_s"] == pytest.approx(rec["metrics"]["samples_per_s"] * 32)
    assert "shard audit: ok" in p.stdout


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_gpt_tiny_learns_more_than_the_token_frequencies(tmp_path, text_dir):
    """Trained with --target on the held-out loss, the model ends below the context-free
    baseline on the same held-out tokens, its interval clear of 0: it learned context, not
    only how often each byte occurs. Catches a model that cannot learn (causal mask on the
    wrong side, targets not shifted, a loss that trains nothing)."""
    out = tmp_path / "out"
    p = run_cli("run", "--task", "lm", "--dataset", "text", "--data-dir", text_dir, *TINY,
                "--batch-size", 16, "--optimizer", "adamw", "--lr", "3e-3",
                "--warmup-steps", 1, "--target", "loss=2.8", "--eval-every", 20,
                "--set", "data.eval_windows=64", "--loader", "naive", "--out", out,
                "--no-progress", timeout=880)
    rec = _one(out)
    m = rec["metrics"]
    assert rec["status"] == "ok", (rec["error"], p.stderr[-2000:])
    assert rec["target"]["reached"] and m["loss"] < m["baseline_loss"]
    assert m["baseline_margin_lo"] > 0 and "beats the context-free baseline" in p.stdout
    assert "time to target: loss <= 2.8 reached" in p.stdout
