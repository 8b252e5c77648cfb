"""The server: HTTP (uvicorn + the Starlette app), gRPC (grpcio's asyncio
server) and Prometheus metrics (prometheus_client's ASGI app under uvicorn),
all on one asyncio event loop in a thread of their own, over one repository.

The thread keeps the caller's main thread free: the command line waits there
for Ctrl-C, tests start and stop servers in-process. Stopping drains: the
server reports not ready, stops accepting connections and RPCs, lets those in
flight finish (up to ``drain_timeout``), then unloads the models once their
queued requests ran.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading

import uvicorn
from prometheus_client import make_asgi_app

from ..errors import InvalidArgumentError
from . import grpc as grpc_api
from . import http as http_api
from .inference import InferenceService
from .metrics import ServerMetrics
from .repository import ModelRepository

log = logging.getLogger("twinfer.serve")

DEFAULT_MAX_REQUEST_BYTES = 256 << 20


def _listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on sockets that
    # say they are TCP, and without it a response's header and body writes
    # wait out the client's delayed ACK (40 ms per request).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: the server decides when to stop."""

    def install_signal_handlers(self) -> None:  # older uvicorn
        pass


def _port(port: int | None, what: str) -> int | None:
    """A listening port: None or a negative number (the command line's -1)
    for off, 0 for a free one."""
    if port is None or (isinstance(port, int) and port < 0):
        return None
    if not isinstance(port, int) or port > 65535:
        raise InvalidArgumentError(f"{what} must be a port number (0 picks a free one; None or -1: off), not {port!r}")
    return port


class Server:
    """Serve a model repository over KServe v2 HTTP and gRPC, with metrics.

    Ports: 0 picks a free port (read it from ``http_port`` etc. after
    ``start``); None leaves that endpoint off.

    >>> with Server("models", http_port=0, grpc_port=0, metrics_port=0) as server:
    ...     client = tritonclient.http.InferenceServerClient(f"localhost:{server.http_port}")
    """

    def __init__(self, model_repository: str, *, host: str = "127.0.0.1", http_port: int | None = 8000,
                 grpc_port: int | None = 8001, metrics_port: int | None = 8002, control_mode: str = "none",
                 load_models: list[str] | None = None, gpu_device: str = "cuda",
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, drain_timeout: float = 30.0):
        self.host = host
        self.http_port, self.grpc_port, self.metrics_port = (_port(p, what) for p, what in (
            (http_port, "http_port"), (grpc_port, "grpc_port"), (metrics_port, "metrics_port")))
        self.max_request_bytes = int(max_request_bytes)
        self.drain_timeout = float(drain_timeout)
        self.load_models = list(load_models or [])
        self.metrics = ServerMetrics(memory_source=lambda: self.repository.memory_rows(),
                                     queue_source=lambda: self.repository.queue_rows())
        self.repository = ModelRepository(model_repository, control_mode=control_mode, gpu_device=gpu_device,
                                          metrics=self.metrics)
        self.service = InferenceService(self.repository)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    # -- lifecycle (caller's thread) --------------------------------------------------
    def start(self) -> "Server":
        """Bind the ports, load the startup models and return once serving
        (raises what went wrong if it could not start)."""
        self._thread = threading.Thread(target=self._run_loop, name="twinfer-serve", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error
        return self

    def stop(self) -> None:
        """Drain and stop; returns when everything is shut down."""
        if self._loop is not None and self._stop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the event loop (server thread) -----------------------------------------------
    def _run_loop(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as e:  # noqa: BLE001 - reported to start()'s caller
            if not self._started.is_set():
                self._error = e
            else:
                log.exception("the server stopped on an error")
        finally:
            self._started.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        web_servers: list[tuple[uvicorn.Server, asyncio.Task]] = []
        grpc_server = None
        try:
            if self.http_port is not None:
                app = http_api.create_app(self.service, self.max_request_bytes)
                running, self.http_port = await self._start_uvicorn(app, self.http_port)
                web_servers.append(running)
            if self.grpc_port is not None:
                grpc_server, self.grpc_port = grpc_api.create_server(
                    self.service, f"{self.host}:{self.grpc_port}", self.max_request_bytes)
                await grpc_server.start()
            if self.metrics_port is not None:
                running, self.metrics_port = await self._start_uvicorn(make_asgi_app(self.metrics.registry),
                                                                       self.metrics_port)
                web_servers.append(running)
            await asyncio.to_thread(self.repository.load_startup_models, self.load_models)
            self.service.ready = True
            self._started.set()
            await self._stop.wait()
        finally:
            await self._drain(web_servers, grpc_server)

    async def _start_uvicorn(self, app, port: int):
        sock = _listening_socket(self.host, port)
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off",
                                timeout_graceful_shutdown=self.drain_timeout)
        server = _Uvicorn(config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if task.done():
                task.result()  # raises why it could not start
                raise OSError(f"the HTTP server on {self.host}:{port} did not start")
            await asyncio.sleep(0.01)
        return (server, task), sock.getsockname()[1]

    async def _drain(self, web_servers, grpc_server) -> None:
        self.service.ready = False
        waits = []
        for server, task in web_servers:
            server.should_exit = True
            waits.append(task)
        if grpc_server is not None:
            waits.append(grpc_server.stop(self.drain_timeout))
        results = await asyncio.gather(*waits, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                log.error("while stopping: %s: %s", type(r).__name__, r)
        await asyncio.to_thread(self.repository.close)



def build_http_app(model_repository: str, *, load_models: list[str] | None = None, control_mode: str = "none",
                   gpu_device: str = "cuda", max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES):
    """The KServe v2 HTTP app alone, its models loaded, for another ASGI host
    to run: Ray Serve's ``serve.ingress`` (docs/serving.md), gunicorn with
    uvicorn workers. No gRPC and no metrics port; the host scales it out."""
    repository = ModelRepository(model_repository, control_mode=control_mode, gpu_device=gpu_device)
    repository.load_startup_models(load_models)
    service = InferenceService(repository)
    service.ready = True
    return http_api.create_app(service, max_request_bytes)
