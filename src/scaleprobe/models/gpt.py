"""A GPT-style decoder: the transformer language model of ``--task lm``.

    tokens (B x T) -> token embedding + position embedding
                   -> blocks: x + attn(LN(x)), then x + MLP(LN(x))   (pre-norm, GPT-2)
                   -> LN -> head (tied to the token embedding) -> logits (B x T x vocab)

Attention is ``scaled_dot_product_attention(..., is_causal=True)``; the MLP 4 x width with
GELU (tanh); biases, initialisation and no dropout as GPT-2. The head is tied (its weight is
the token embedding's, counted once), and both are padded to a multiple of ``PAD_MULTIPLE``
rows, the padded ids' logits -inf; ``model.blocks`` is the ``nn.ModuleList`` a sharded
strategy wraps. docs/TASKS.md gives the model, why the padding (measured) and what it leaves
unchanged.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from scaleprobe.features.lmspec import GPTShape

PAD_MULTIPLE = 64  # rows of the embedding and head: a multiple of this


def padded_vocab(vocab: int) -> int:
    """``vocab`` rounded up to a multiple of PAD_MULTIPLE."""
    return -(-vocab // PAD_MULTIPLE) * PAD_MULTIPLE


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        # B x T x C -> B x heads x T x C/heads
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class MLP(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, 4 * width)
        self.proj = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = MLP(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """``forward(tokens)`` -> logits; tokens are int64 ``B x T`` with ``T <= context``."""

    def __init__(self, shape: GPTShape, vocab: int) -> None:
        super().__init__()
        self.shape, self.vocab = shape, vocab  # the data's vocabulary
        self.vocab_padded = padded_vocab(vocab)
        self.tok_emb = nn.Embedding(self.vocab_padded, shape.width)
        self.pos_emb = nn.Embedding(shape.context, shape.width)
        self.blocks = nn.ModuleList(Block(shape.width, shape.heads) for _ in range(shape.layers))
        self.ln_f = nn.LayerNorm(shape.width)
        self.head = nn.Linear(shape.width, self.vocab_padded, bias=False)
        self.head.weight = self.tok_emb.weight  # tied
        mask = None
        if self.vocab_padded > vocab:  # the padded ids' logits: -inf (never a parameter)
            mask = torch.zeros(self.vocab_padded)
            mask[vocab:] = float("-inf")
        self.register_buffer("pad_mask", mask, persistent=False)
        self._init_weights()

    def _init_weights(self) -> None:
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * self.shape.layers) if name.endswith("proj.weight") \
                    else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        if t > self.shape.context:
            raise ValueError(f"a sequence of {t} tokens is longer than the model's context "
                             f"({self.shape.context})")
        pos = torch.arange(t, device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(pos)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        mask = self.pad_mask
        if mask is not None and mask.dtype != x.dtype:
            mask = mask.to(x.dtype)  # bf16 weights without autocast (FSDP's policy)
        return F.linear(x, self.head.weight, mask)


def matmul_params(model: GPT) -> int:
    """N of the FLOPs formula 6N + 12 L d T (docs/FLOPS.md): the weights of the matrix
    products every token passes through, each counted once: every block's four Linear
    weights (12 d^2 per block) and the head's (padded vocab x d, the tied token embedding:
    the product the device computes, padded rows included). Biases,
    LayerNorms and the position embedding are not in it (no matrix product), nor the token
    embedding a second time (its lookup is a gather)."""
    blocks = sum(m.weight.numel() for m in model.blocks.modules() if isinstance(m, nn.Linear))
    return blocks + model.head.weight.numel()
