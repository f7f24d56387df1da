"""A small GPT trained with torch.compile, as people write it: no scaleprobe anywhere.

    python examples/scripts/gpt_compiled.py --steps 40
    scaleprobe wrap --warmup-steps 5 -- examples/scripts/gpt_compiled.py --steps 40

The data is real text that ships with every Python install: the standard library's own source
files, read as bytes (a vocabulary of 256), cut into windows of --seq tokens by a DataLoader.
The model is a decoder-only transformer (token and position embeddings, --layers blocks of
causal self-attention through scaled_dot_product_attention and a 4x MLP, a final norm, a head
tied to the token embedding), trained with AdamW; ``torch.compile(model)`` compiles it on the
first step (``--no-compile`` runs it eagerly).

It prints its own throughput over the steps after --warmup (samples / wall seconds from the end
of step --warmup to the end of the last step), to compare with what `scaleprobe wrap` measures
with --warmup-steps set to the same number, and the CPU time this process used over the same
steps (``cpu_s``, all its threads): on a machine shared with other work, wall time moves with
the neighbours, CPU time far less.
"""

import argparse
import math
import sysconfig
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset


def stdlib_bytes(limit: int) -> torch.Tensor:
    """Up to ``limit`` bytes of the standard library's .py files, in a fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks, total = [], 0
    for path in sorted(root.glob("*.py")):
        data = path.read_bytes()
        chunks.append(data)
        total += len(data)
        if total >= limit:
            break
    return torch.frombuffer(bytearray(b"".join(chunks)[:limit]), dtype=torch.uint8).long()


class Windows(Dataset):
    """Input and next-token target windows of ``seq`` tokens over one token array."""

    def __init__(self, tokens: torch.Tensor, seq: int) -> None:
        self.tokens, self.seq = tokens, seq

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.seq

    def __getitem__(self, i: int):
        w = self.tokens[i * self.seq: i * self.seq + self.seq + 1]
        return w[:-1], w[1:]


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, seq: int, layers: int, d: int, heads: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40, help="optimizer steps in all")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--tokens", type=int, default=2_000_000, help="bytes of text to train on")
    p.add_argument("--mode", default="default", help="torch.compile mode (inductor's)")
    p.add_argument("--backend", default="inductor",
                   help="torch.compile backend (aot_eager: graphs without code generation)")
    p.add_argument("--amp", choices=("off", "bf16"), default="off", help="bf16 autocast")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the own figure")
    p.add_argument("--threads", type=int, default=None, help="torch's CPU threads")
    args = p.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    data = Windows(stdlib_bytes(args.tokens), args.seq)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True)
    model = GPT(256, args.seq, args.layers, args.d, args.heads).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1,
                            fused=device == "cuda")
    if args.compile:
        model = (torch.compile(model, mode=args.mode) if args.backend == "inductor"
                 else torch.compile(model, backend=args.backend))

    step, samples, t0, t_end, c0, c_end = 0, 0, None, None, None, None
    while step < args.steps:
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            with torch.autocast(device, dtype=torch.bfloat16, enabled=args.amp == "bf16"):
                logits = model(xb)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), yb.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            t_end, c_end = time.perf_counter(), time.process_time()  # the last step's end
            step += 1
            if step == args.warmup:
                t0, c0 = time.perf_counter(), time.process_time()
            elif step > args.warmup:
                samples += len(xb)
            if step % 10 == 0 or step == args.steps:
                print(f"step {step}: loss {loss.item():.4f}")
            if step == args.steps:
                break
    seconds = t_end - t0 if t0 is not None else 0.0
    cpu = c_end - c0 if c0 is not None else 0.0
    print(f"own: steps={step - args.warmup} samples={samples} seconds={seconds:.6f} "
          f"samples_per_s={samples / seconds if seconds else 0:.2f} cpu_s={cpu:.6f}")


if __name__ == "__main__":
    main()
