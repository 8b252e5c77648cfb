"""twinfer's exceptions. Every error raised by the core is one of these, with
``node`` and ``op`` naming the graph node at fault when there is one."""


class Error(RuntimeError):
    """Base class of every twinfer error."""

    node: str | None = None
    op: str | None = None


class ModelFormatError(Error):
    """The model bytes or fields are malformed (truncated file, bad field, unsafe path)."""


class UnsupportedOpError(Error):
    """An op, opset or attribute value twinfer does not implement (all are listed at load)."""


class ShapeError(Error, ValueError):
    """Shapes that do not fit: a wrong input shape, an impossible reshape, ..."""


class DTypeError(Error, TypeError):
    """Element types that do not fit."""


class DeviceError(Error):
    """A device that is missing, or a tensor on the wrong device."""


class OutOfMemoryError(Error, MemoryError):
    """An allocation failed (host or device)."""


class InvalidArgumentError(Error, ValueError):
    """Bad use of the API: a missing feed, an unknown input name, a bad option."""


__all__ = [
    "Error",
    "ModelFormatError",
    "UnsupportedOpError",
    "ShapeError",
    "DTypeError",
    "DeviceError",
    "OutOfMemoryError",
    "InvalidArgumentError",
]
