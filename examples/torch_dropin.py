"""PyTorch drop-in: run an nn.Module on twinfer without leaving PyTorch.

    python examples/torch_dropin.py

Two ways: ``twinfer.torch.compile`` (exports once to ONNX, cached on disk, and
returns an nn.Module) and ``torch.compile(model, backend="twinfer")``. Tensors
go in and out through DLPack without copies.
"""

from __future__ import annotations

import time

import torch
import torchvision

import twinfer.torch  # also registers the torch.compile backend "twinfer"


def timed(fn, x, n=10):
    fn(x)
    t0 = time.perf_counter()
    for _ in range(n):
        fn(x)
    return (time.perf_counter() - t0) / n * 1e3


def main() -> None:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()

    # 1. The drop-in module: compiled for batch 2, runs any batch size.
    fast = twinfer.torch.compile(model, torch.randn(2, 3, 64, 64))
    print(fast)
    x = torch.randn(5, 3, 64, 64)
    with torch.inference_mode():
        expected = model(x)
    y = fast(x)
    print(f"output {tuple(y.shape)} {y.dtype} on {y.device}; from the disk cache: {fast.cache_hit}")
    diff = (y - expected).abs().max().item()
    print(f"drop-in: matches PyTorch (max abs diff {diff:.2e})")
    assert diff < 1e-3

    # 2. The torch.compile backend.
    compiled = torch.compile(model, backend="twinfer")
    with torch.inference_mode():
        diff_backend = (compiled(x) - expected).abs().max().item()
    print(f"torch.compile backend: matches PyTorch (max abs diff {diff_backend:.2e})")
    assert diff_backend < 1e-3

    with torch.inference_mode():
        t_torch = timed(model, x)
    print(f"batch 5, mean of 10 runs: PyTorch eager {t_torch:.1f} ms, twinfer {timed(fast, x):.1f} ms")


if __name__ == "__main__":
    main()
