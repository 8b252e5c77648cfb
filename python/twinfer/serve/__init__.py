"""Serving: dynamic batching in-process (twinfer.Batcher), and a KServe v2
server over a Triton-style model repository (``twinfer serve``).

    batcher.py     twinfer.Batcher: merge concurrent requests into batches
    config.py      config.pbtxt into Triton's ModelConfig, checked
    repository.py  the model folder, versions, load / unload
    model.py       one served model version: engines, batcher, request checks
    inference.py   the protocol's operations, independent of the wire
    http.py        the HTTP/REST front end (Starlette under uvicorn)
    grpc.py        the gRPC front end (grpcio, the protocol's protos)
    metrics.py     Prometheus metrics
    statistics.py  the statistics extension (per model version)
    server.py      all of it on one event loop, started and drained

Only the Batcher is imported here: it needs nothing beyond twinfer, while the
server needs the `serve` extra (pip install "twinfer[serve]").
"""

from .batcher import Batcher, BatcherClosed, BatchRecord, QueueFull

__all__ = ["Batcher", "BatcherClosed", "BatchRecord", "QueueFull"]
