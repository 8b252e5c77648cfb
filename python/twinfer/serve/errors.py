"""Errors of the serving layer, each with the HTTP status and gRPC code a
client receives, so the HTTP and gRPC front ends answer the same failure the
same way (http.py and grpc.py only translate)."""

from __future__ import annotations


class ServeError(Exception):
    """A request the server answers with an error instead of a result."""

    http_status = 500
    grpc_code = "INTERNAL"


class InvalidRequest(ServeError):
    """The request itself is wrong: shape, datatype, names, JSON, parameters."""

    http_status = 400
    grpc_code = "INVALID_ARGUMENT"


class NotFound(ServeError):
    """An unknown model or version."""

    http_status = 404
    grpc_code = "NOT_FOUND"


class Unavailable(ServeError):
    """The model exists but cannot take the request now (not ready, unloading,
    its queue full, the server shutting down)."""

    http_status = 503
    grpc_code = "UNAVAILABLE"


class VersionClosed(Unavailable):
    """The served version closed between the request finding it and
    submitting to it: a reload replaced it, or an unload took it away. The
    request is tried once more on what the repository serves now."""


class RequestTooLarge(ServeError):
    """The request body is larger than the server's limit."""

    http_status = 413
    grpc_code = "RESOURCE_EXHAUSTED"


class RequestTimedOut(ServeError):
    """The request waited in the model's queue longer than its timeout."""

    http_status = 408
    grpc_code = "DEADLINE_EXCEEDED"


class ModelLoadError(ServeError):
    """A model could not be loaded (its configuration or its files are wrong).
    The message names the model and the configuration field at fault."""

    http_status = 400
    grpc_code = "INVALID_ARGUMENT"
