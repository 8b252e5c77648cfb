"""Streams from the frameworks users hold, as the integer handles twinfer's
core takes (a cudaStream_t; an id on the simulated device).

Accepted: None, an int, a twinfer Stream (``context.stream``), a
``torch.cuda.Stream`` (or ExternalStream), a CuPy stream, or any object
with ``cuda_stream`` or ``ptr`` (the two spellings frameworks use)."""

from __future__ import annotations

# DLPack's "legacy default stream" (what CUDA's stream 0 means too).
LEGACY_DEFAULT = 1


def stream_handle(stream) -> int | None:
    if stream is None:
        return None
    if isinstance(stream, bool):
        raise TypeError("stream must be a stream object or an int handle, not a bool")
    if isinstance(stream, int):
        return stream
    for attr in ("handle", "cuda_stream", "ptr"):
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return h
    raise TypeError(f"cannot use a {type(stream).__name__} as a stream (expected an int handle, a twinfer, torch "
                    "or CuPy stream)")


def producer_stream(x) -> int:
    """The stream a foreign CUDA array is being produced on, when the caller
    named none: torch's and CuPy's current stream (so twinfer runs where the
    user's own next op would), else the legacy default stream."""
    module = type(x).__module__.split(".")[0]
    if module == "torch":
        import torch

        h = torch.cuda.current_stream(x.device).cuda_stream
        return h if h else LEGACY_DEFAULT
    if module == "cupy":
        import cupy

        h = cupy.cuda.get_current_stream().ptr
        return h if h else LEGACY_DEFAULT
    return LEGACY_DEFAULT
