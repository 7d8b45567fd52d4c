"""bf16 and fp16 vs fp32 on a GPU: step time, loss and peak memory of charlm under the harness.

The same comparison as ``precision_cpu.py`` (same method: 2 epochs per run, the second
epoch's ``samples_per_s``, precisions interleaved, medians) at sizes where a GPU has work
to do. fp32 runs with PyTorch's defaults (TF32 matmuls off). A precision the GPU cannot
run (bf16 before compute capability 8.0) shows up as ``unsupported_precision``.
Without CUDA the script says so and exits 0.

    .venv/bin/python benchmarks/precision_gpu.py [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from precision_cpu import compare  # noqa: E402  (same directory; benchmarks/ is no package)

GPU_CASES = {
    "charlm 0.12M": {"n_layer": 2, "n_embd": 64, "n_head": 4, "block_size": 64, "batch_size": 64,
                     "samples_per_epoch": 64 * 50},
    "charlm 10.8M": {"n_layer": 6, "n_embd": 384, "n_head": 6, "block_size": 256, "batch_size": 64,
                     "samples_per_epoch": 64 * 50, "corpus_bytes": 5_000_000},
    "charlm 85M": {"n_layer": 12, "n_embd": 768, "n_head": 12, "block_size": 512, "batch_size": 32,
                   "samples_per_epoch": 32 * 30, "corpus_bytes": 5_000_000},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("precision_gpu: no CUDA device here; nothing measured (run precision_cpu.py for the CPU)")
        return
    name = torch.cuda.get_device_name()
    capability = ".".join(map(str, torch.cuda.get_device_capability()))
    print(f"torch {torch.__version__}, {name} (compute capability {capability}), {args.reps} interleaved "
          "repetitions; ms/step of the second epoch, evaluation excluded")
    compare(GPU_CASES, reps=args.reps, use_gpu=True)


if __name__ == "__main__":
    main()
