"""scaleprobe's reference LM against a plain nanoGPT-style script of the same shape, eager and
compiled, in one run: is `scaleprobe run --task lm --model gpt2_small` as fast as a
well-written script?

    python benchmarks/lm_vs_bare.py                          # gpt2_small, bf16, batch 16 (GPU)
    python benchmarks/lm_vs_bare.py --modes eager --layers 2 --width 64 --heads 2 --seq 64 \\
        --vocab 500 --batch 8 --steps 20 --warmup 3 --amp off   # tiny, on the CPU

Each measurement is a fresh process, interleaved per mode as bare, scaleprobe, bare (``--pairs``
times): the scaleprobe run is held against the geometric mean of the two bare runs around it,
and the two bare runs against each other give the machine's own noise (A/A). Both sides report
samples/s as the batch over the median step of the timed steps (scaleprobe: its record's
``samples_per_s``, the same rule), so the ratio is like for like.

The bare side (``--bare``, run by this file) is what nanoGPT's ``model.py`` / ``train.py`` do:
token and position embeddings, pre-norm blocks with ``F.scaled_dot_product_attention(...,
is_causal=True)``, a 4x GELU MLP, a tied head, the vocabulary padded to a multiple of 64 rows
(50,257 -> 50,304), AdamW fused on CUDA, autocast bf16, one batch of random tokens made once on
the device and reused (as scaleprobe's ``tokens-synthetic``), ``torch.compile(model)`` for the
compiled mode; timed per step with CUDA events read after the loop (``perf_counter`` on the
CPU), no synchronisation inside the loop. The scaleprobe side is ``scaleprobe run --task lm
--model gpt2_small --dataset tokens-synthetic`` with the same shape, batch, precision and
optimizer (``--layers`` etc. when the shape is not gpt2_small's).

Prints one line per process and, per mode, the ratio scaleprobe / bare (median over the pairs,
each pair's ratio listed) and the A/A ratios. Figures go to docs/BENCHMARKS.md with the
machine, date and command.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bare(a: argparse.Namespace) -> None:
    """One measurement of the plain script; prints {"samples_per_s", "median_step_s"}."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    vpad = -(-a.vocab // 64) * 64

    class Block(nn.Module):
        def __init__(self, d: int, h: int) -> None:
            super().__init__()
            self.h = h
            self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, c = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))
            return x + self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vpad, a.width), nn.Embedding(a.seq, a.width)
            self.h = nn.ModuleList(Block(a.width, a.heads) for _ in range(a.layers))
            self.ln_f = nn.LayerNorm(a.width)
            self.lm_head = nn.Linear(a.width, vpad, bias=False)
            self.lm_head.weight = self.wte.weight

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.h:
                x = blk(x)
            return self.lm_head(self.ln_f(x))

    model = GPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, fused=dev.type == "cuda")
    if a.compile:
        model = torch.compile(model)
    toks = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=dev)
    x, y = toks[:, :-1], toks[:, 1:]
    amp = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.amp == "bf16")

    def step() -> None:
        with amp:
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(a.warmup):
        step()
    times: list[float] = []
    if dev.type == "cuda":
        torch.cuda.synchronize()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(a.steps + 1)]
        ev[0].record()
        for i in range(a.steps):
            step()
            ev[i + 1].record()
        torch.cuda.synchronize()
        times = [ev[i].elapsed_time(ev[i + 1]) / 1e3 for i in range(a.steps)]
    else:
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
            t1 = time.perf_counter()
            times.append(t1 - t0)
            t0 = t1
    med = statistics.median(times)
    print(json.dumps({"samples_per_s": a.batch / med, "median_step_s": med}), flush=True)


def _bare_cmd(a: argparse.Namespace, compiled: bool) -> list[str]:
    cmd = [sys.executable, __file__, "--bare", "--layers", str(a.layers), "--width",
           str(a.width), "--heads", str(a.heads), "--seq", str(a.seq), "--vocab", str(a.vocab),
           "--batch", str(a.batch), "--steps", str(a.steps), "--warmup", str(a.warmup),
           "--amp", a.amp]
    return cmd + (["--compile"] if compiled else [])


def _scaleprobe(a: argparse.Namespace, compiled: bool, out: Path) -> float:
    cmd = [sys.executable, "-m", "scaleprobe", "run", "--task", "lm", "--model", "gpt2_small",
           "--dataset", "tokens-synthetic", "--layers", str(a.layers), "--width", str(a.width),
           "--heads", str(a.heads), "--seq-len", str(a.seq), "--set",
           f"data.vocab_size={a.vocab}", "--batch-size", str(a.batch), "--steps", str(a.steps),
           "--warmup-steps", str(a.warmup), "--amp", a.amp, "--optimizer", "adamw",
           "--no-progress", "--out", str(out)]
    if compiled:
        cmd.append("--compile")
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()
            if line.strip()] if (out / "results.jsonl").is_file() else []
    if p.returncode != 0 or not rows or rows[-1].get("status") != "ok":
        sys.exit(f"scaleprobe run failed ({p.returncode}): {p.stderr[-2000:]}")
    return float(rows[-1]["metrics"]["samples_per_s"])


def _bare_run(a: argparse.Namespace, compiled: bool) -> float:
    p = subprocess.run(_bare_cmd(a, compiled), capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bare script failed: {p.stderr[-2000:]}")
    return float(json.loads(p.stdout.strip().splitlines()[-1])["samples_per_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024, help="tokens per sample (the context)")
    ap.add_argument("--vocab", type=int, default=50257, help="the data's vocabulary")
    ap.add_argument("--batch", type=int, default=16, help="samples per step")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per process")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps (compiling in them)")
    ap.add_argument("--amp", choices=("off", "bf16"), default="bf16")
    ap.add_argument("--modes", default="eager,compiled", help="eager, compiled or both")
    ap.add_argument("--pairs", type=int, default=2, help="bare/scaleprobe/bare triples a mode")
    ap.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--compile", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.bare:
        bare(a)
        return
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    print(f"shape: {a.layers} layers x {a.width} x {a.heads} heads, seq {a.seq}, vocabulary "
          f"{a.vocab}, batch {a.batch}, amp {a.amp}; {a.steps} timed steps after {a.warmup}")
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in a.modes.split(","):
            compiled = mode.strip() == "compiled"
            ratios, aa = [], []
            for i in range(a.pairs):
                b1 = _bare_run(a, compiled)
                sp = _scaleprobe(a, compiled, Path(tmp) / f"{mode}{i}")
                b2 = _bare_run(a, compiled)
                ratios.append(sp / math.sqrt(b1 * b2))
                aa.append(b2 / b1)
                print(f"{mode} pair {i + 1}: bare {b1:.2f}, scaleprobe {sp:.2f}, bare "
                      f"{b2:.2f} samples/s -> {ratios[-1]:.3f}x", flush=True)
            summary.append(f"{mode}: scaleprobe / bare {statistics.median(ratios):.3f}x (pairs "
                           f"{', '.join(f'{r:.3f}' for r in ratios)}); A/A bare / bare "
                           f"{', '.join(f'{r:.3f}' for r in aa)}")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
