"""Running a twinfer Engine on torch tensors, zero-copy through DLPack.

Inputs go in as views of the torch tensors' memory (``twinfer.from_dlpack``),
outputs come back as torch tensors that own twinfer's freshly allocated
output buffers (``torch.from_dlpack``): no copies either way for compact
tensors on the engine's device.

CUDA: work is ordered on torch's current stream. DLPack's ``stream`` argument
tells torch which stream twinfer will read on; when the engine can run on a
given stream it gets torch's, otherwise torch's stream is synchronised before
the run so twinfer never reads memory torch is still writing."""

from __future__ import annotations

import inspect
from typing import Sequence

import torch

import twinfer
from twinfer.errors import InvalidArgumentError

_TORCH_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "bool": torch.bool,
}


def torch_dtype(name: str) -> torch.dtype | None:
    return _TORCH_DTYPES.get(name)


def twinfer_device(device: torch.device) -> str:
    """torch.device -> twinfer's device string ("cpu", "cuda:N")."""
    if device.type == "cpu":
        return "cpu"
    if device.type == "cuda":
        return f"cuda:{device.index if device.index is not None else torch.cuda.current_device()}"
    raise InvalidArgumentError(f"twinfer runs on 'cpu' and 'cuda' devices, not '{device}'")


def as_torch_device(device) -> torch.device:
    """A device= argument as a torch.device; twinfer's own "sim" (its test
    device holds no torch tensors) and anything torch does not know are
    refused by name."""
    try:
        return torch.device(device)
    except (RuntimeError, TypeError):
        raise InvalidArgumentError(f"device {device!r}: the torch integration runs on torch's devices ('cpu', "
                                   "'cuda', 'cuda:N'); 'sim', twinfer's test device, holds no torch tensors") from None


def module_device(module: torch.nn.Module, args: Sequence[torch.Tensor] = ()) -> torch.device:
    """Where the module lives: its first parameter or buffer, else its first input, else the CPU."""
    for t in module.parameters():
        return t.device
    for t in module.buffers():
        return t.device
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device
    return torch.device("cpu")


def _accepts_stream(engine: twinfer.Engine) -> bool:
    try:
        return "stream" in inspect.signature(engine.run).parameters
    except (TypeError, ValueError):
        return False


class TorchRunner:
    """Feeds torch tensors to an engine and returns its outputs as torch tensors."""

    def __init__(self, engine: twinfer.Engine, device: torch.device):
        self.engine = engine
        self.device = device
        self.input_names = [s.name for s in engine.inputs]
        self.input_dtypes = [torch_dtype(s.dtype) for s in engine.inputs]
        self.output_names = [s.name for s in engine.outputs]
        self._stream_arg = _accepts_stream(engine)

    def _to_twinfer(self, x: torch.Tensor, dtype: torch.dtype | None, stream) -> twinfer.Tensor:
        if x.device != self.device:
            x = x.to(self.device)
        if dtype is not None and x.dtype != dtype:
            x = x.to(dtype)
        x = x.detach()
        if not x.is_contiguous():
            x = x.contiguous()
        if stream is None:
            return twinfer.from_dlpack(x)
        # Tell torch the consumer's stream, so it orders its pending work before
        # ours (DLPack's stream 0 is ambiguous: the default stream is 1).
        return twinfer.Tensor._from_capsule(x.__dlpack__(stream=stream.cuda_stream or 1))

    def __call__(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        if len(inputs) != len(self.input_names):
            raise InvalidArgumentError(f"expected {len(self.input_names)} input tensors, got {len(inputs)}")
        for i, x in enumerate(inputs):
            if not isinstance(x, torch.Tensor):
                raise InvalidArgumentError(
                    f"input {i} ({self.input_names[i]}) is a {type(x).__name__}; the compiled module takes tensors"
                )
        if self.device.type == "cuda":
            # torch exports CUDA tensors of the current device only, and the
            # default stream handles (1, 2) name the current device's.
            with torch.cuda.device(self.device):
                return self._run(inputs, torch.cuda.current_stream(self.device))
        return self._run(inputs, None)

    def _run(self, inputs: Sequence[torch.Tensor], stream) -> list[torch.Tensor]:
        feeds = {
            name: self._to_twinfer(x, dt, stream) for name, x, dt in zip(self.input_names, inputs, self.input_dtypes)
        }
        if stream is not None and self._stream_arg:
            out = self.engine.run(feeds, stream=stream.cuda_stream or 1)
        else:
            if stream is not None:
                stream.synchronize()
            out = self.engine.run(feeds)
        return [torch.from_dlpack(out[name]) for name in self.output_names]
