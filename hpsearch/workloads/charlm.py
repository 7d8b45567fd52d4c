"""Byte-level language model: a small causal transformer on Python's own standard library.

Data: the ``.py`` files under ``sysconfig.get_paths()["stdlib"]`` (test suites and
``site-packages`` skipped), in sorted path order, concatenated up to ``corpus_bytes``
(default 1,000,000; CPython 3.11 has about 12 MB). Every machine with Python has them, so
nothing is downloaded; the same Python version gives the same corpus.
Tokens are bytes (vocabulary 256). The first 90% is for training and the last 10% is
held out (split by position, ``val_fraction``). An epoch is ``samples_per_epoch``
windows of ``block_size + 1`` bytes drawn at random offsets of the training part, redrawn
every epoch as a function of ``(seed, epoch)``; validation uses ``val_samples`` fixed
windows spread evenly over the held-out part.

Model: nanoGPT's GPT at toy size: token and position embeddings, ``n_layer`` pre-norm
blocks of causal self-attention (``scaled_dot_product_attention``) and a 4x GELU MLP,
final LayerNorm, output layer tied to the token embedding. Defaults (``n_layer=2``,
``n_embd=64``, ``n_head=4``, ``block_size=64``) give 0.12M parameters.

Cost: with the defaults (``samples_per_epoch=2048``, batch size 64: 32 steps) an epoch
takes about 2 s on one CPU core, evaluation included. Validation loss starts at
ln 256 = 5.5 nats and falls to about 2.2 after 5 epochs at ``lr=3e-3``; lr and warmup
move it by tenths of a nat within a few epochs. Precision moves it by thousandths but
changes the speed: on a CPU, bf16 is slower than fp32 at this size and about twice as
fast at a few million parameters (``benchmarks/precision_cpu.py``).

Config keys (beside the loop's): ``n_layer`` (2), ``n_embd`` (64), ``n_head`` (4),
``block_size`` (64), ``dropout`` (0.0), ``bias`` (True), ``samples_per_epoch`` (2048),
``val_samples`` (256), ``corpus_bytes`` (1,000,000), ``val_fraction`` (0.1).
Metric: ``val_loss`` in nats per byte (and ``val_bits_per_byte``).
"""

from __future__ import annotations

import math
import os
import sysconfig
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from hpsearch.train.workload import Workload

__all__ = ["WORKLOAD", "CharLM", "build_model", "build_data", "corpus"]

DEFAULTS = {
    "n_layer": 2,
    "n_embd": 64,
    "n_head": 4,
    "block_size": 64,
    "dropout": 0.0,
    "bias": True,
    "samples_per_epoch": 2048,
    "val_samples": 256,
    "corpus_bytes": 1_000_000,
    "val_fraction": 0.1,
}
VOCAB = 256


def _get(config: dict, key: str):
    return type(DEFAULTS[key])(config.get(key, DEFAULTS[key]))


# --- data ------------------------------------------------------------------------------


# Test suites and installed third-party packages are not "the standard library's source".
_SKIPPED_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test"})


@lru_cache(maxsize=4)
def corpus(max_bytes: int = DEFAULTS["corpus_bytes"]) -> torch.Tensor:
    """Up to ``max_bytes`` of the standard library's ``.py`` files as a uint8 tensor.

    Files are taken in sorted order of their path relative to the stdlib directory
    (test suites and ``site-packages`` skipped); CPython 3.11 has about 12.1 MB of them.

    Raises:
        ValueError: The standard library has fewer than ``max_bytes`` bytes of source.
    """
    root = sysconfig.get_paths()["stdlib"]
    paths = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in _SKIPPED_DIRS]
        paths += [os.path.relpath(os.path.join(directory, n), root) for n in names if n.endswith(".py")]
    parts, size = [], 0
    for path in sorted(paths):
        with open(os.path.join(root, path), "rb") as f:
            text = f.read()
        parts.append(text)
        size += len(text)
        if size >= max_bytes:
            break
    data = b"".join(parts)[:max_bytes]
    if len(data) < 10_000:
        raise RuntimeError(f"the standard library at {root} yielded only {len(data)} bytes of source")
    if len(data) < max_bytes:  # never train on less than the config says, silently
        raise ValueError(f"config.corpus_bytes: asks for {max_bytes:,} bytes, but the standard "
                         f"library of this Python has {len(data):,} bytes of source (at "
                         f"{root}); ask for at most that")
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


class ByteWindows(Dataset):
    """Windows of ``block_size + 1`` bytes; item ``i`` is ``(x, y)`` with ``y`` shifted by one.

    Args:
        data: The bytes to draw from.
        block_size: Context length.
        offsets: Start of each window; ``None`` draws ``samples`` random ones per epoch.
        samples: Windows per epoch when drawing at random.
        seed: With the epoch, determines the random offsets.
    """

    def __init__(self, data: torch.Tensor, block_size: int, *, offsets: torch.Tensor | None = None,
                 samples: int = 0, seed: int = 0):
        if len(data) <= block_size + 1:
            raise ValueError(f"block_size: must be < {len(data) - 1}, the bytes available (got {block_size})")
        self.data = data
        self.block_size = block_size
        self.samples = samples
        self.seed = seed
        self._span = torch.arange(block_size + 1)
        self.offsets = offsets if offsets is not None else self._draw(0)

    def _draw(self, epoch: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randint(0, len(self.data) - self.block_size - 1, (self.samples,), generator=g)

    def set_epoch(self, epoch: int) -> None:
        if self.samples:
            self.offsets = self._draw(epoch)

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.get_batch(torch.tensor([i]))
        return x[0], y[0]

    def get_batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.data[self.offsets[indices].unsqueeze(1) + self._span].long()
        return chunk[:, :-1], chunk[:, 1:]


def build_data(config: dict) -> tuple[ByteWindows, ByteWindows]:
    block_size = _get(config, "block_size")
    val_fraction = _get(config, "val_fraction")
    if not 0 < val_fraction < 1:
        raise ValueError(f"config.val_fraction: must be in (0, 1) (got {val_fraction})")
    data = corpus(_get(config, "corpus_bytes"))
    split = int(len(data) * (1 - val_fraction))
    train_part, val_part = data[:split], data[split:]
    val_samples = _get(config, "val_samples")
    last = len(val_part) - block_size - 1
    if last < 0:
        raise ValueError(f"block_size: {block_size} does not fit the {len(val_part)} held-out bytes")
    val_offsets = torch.linspace(0, last, val_samples).long()
    train_set = ByteWindows(train_part, block_size, samples=_get(config, "samples_per_epoch"),
                            seed=int(config.get("seed", 0)))
    return train_set, ByteWindows(val_part, block_size, offsets=val_offsets)


# --- model -----------------------------------------------------------------------------


class _SelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float, bias: bool):
        super().__init__()
        self.n_head = n_head
        self.dropout = dropout
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(B, T, C)))


class _Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float, bias: bool):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, bias=bias)
        self.attn = _SelfAttention(n_embd, n_head, dropout, bias)
        self.ln_2 = nn.LayerNorm(n_embd, bias=bias)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd, bias=bias),
            nn.GELU(),
            nn.Linear(4 * n_embd, n_embd, bias=bias),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class CharLM(nn.Module):
    """A GPT over bytes: ``(batch, time)`` byte ids -> ``(batch, time, 256)`` logits."""

    def __init__(self, *, n_layer: int, n_embd: int, n_head: int, block_size: int, dropout: float = 0.0,
                 bias: bool = True):
        super().__init__()
        if n_embd % n_head:
            raise ValueError(f"n_embd: must be a multiple of n_head ({n_head}) (got {n_embd})")
        self.block_size = block_size
        self.wte = nn.Embedding(VOCAB, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(_Block(n_embd, n_head, dropout, bias) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, bias=bias)
        self.lm_head = nn.Linear(n_embd, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in GPT-2
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight") or name.endswith("mlp.2.weight"):
                # Residual projections start smaller so the residual stream's variance does
                # not grow with depth (GPT-2).
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))
            elif p.dim() >= 2:
                nn.init.normal_(p, mean=0.0, std=0.02)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.size(1)
        if T > self.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.block_size}")
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(T, device=idx.device)))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def build_model(config: dict) -> CharLM:
    return CharLM(
        n_layer=_get(config, "n_layer"),
        n_embd=_get(config, "n_embd"),
        n_head=_get(config, "n_head"),
        block_size=_get(config, "block_size"),
        dropout=_get(config, "dropout"),
        bias=_get(config, "bias"),
    )


def bits_per_byte(outputs: torch.Tensor, batch: tuple[torch.Tensor, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Held-out loss in bits per byte (nats / ln 2), the usual unit for byte-level models."""
    _, y = batch
    nats = F.cross_entropy(outputs.reshape(-1, VOCAB).float(), y.reshape(-1))
    return {"bits_per_byte": nats / math.log(2)}


WORKLOAD = Workload(
    build_model=build_model,
    build_data=build_data,
    metrics=bits_per_byte,
    description="byte-level GPT (0.12M params) on 1 MB of Python stdlib source; ~2 s per epoch on one CPU core",
    defaults=DEFAULTS,
)
