"""PyTorch integration: run nn.Modules on twinfer.

Two ways in:

    import torch, twinfer.torch

    # 1. a drop-in module (exported to ONNX once, cached on disk)
    fast = twinfer.torch.compile(model, example_inputs=(torch.randn(2, 3, 224, 224),))
    y = fast(x)                      # torch tensors in, torch tensors out, same device

    # 2. a torch.compile backend (registered by importing twinfer.torch; an
    #    installed twinfer also registers it through an entry point)
    fast = torch.compile(model, backend="twinfer")

Tensors cross between torch and twinfer through DLPack without copies.
"""

# Every import here is absolute: inside this package, ``torch`` must still mean PyTorch.
from __future__ import annotations

from twinfer.torch._backend import BACKEND_NAME, twinfer_backend
from twinfer.torch._backend import register as register_backend
from twinfer.torch._export import ExportError, ExportWarning
from twinfer.torch._module import CompiledModule, compile

register_backend()

__all__ = ["compile", "CompiledModule", "ExportError", "ExportWarning", "twinfer_backend", "register_backend", "BACKEND_NAME"]
