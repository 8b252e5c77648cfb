"""`twinfer serve --model-repository DIR`: a KServe v2 server (HTTP, gRPC,
Prometheus metrics) over a Triton-style model repository (twinfer.serve)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time

DESCRIPTION = """\
Serve the models of a Triton-style repository over the KServe v2 inference
protocol, as Triton does: HTTP/REST (JSON and binary tensors) and gRPC, so
tritonclient and other KServe v2 clients work unchanged, plus Prometheus
metrics.

  DIR/<model>/config.pbtxt               Triton's model configuration
  DIR/<model>/<version>/model.onnx       or model.twinfer (a saved engine)

Ports: 0 picks a free port, -1 turns that endpoint off. Ctrl-C (or SIGTERM)
drains: requests in flight finish, then the server exits. A model whose
configuration is broken is reported and left unavailable; the others serve.

Needs the [serve] extra: pip install 'twinfer[serve]'. See docs/serving.md.

examples:
  twinfer serve --model-repository models
  twinfer serve --model-repository models --http-port 8080 --grpc-port -1 --metrics-port -1
  twinfer serve --model-repository models --model-control-mode explicit --load-model resnet
"""


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="serve a model repository over KServe v2 HTTP/gRPC, as Triton does",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-repository", required=True, metavar="DIR", help="the model repository folder")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0, every interface)")
    p.add_argument("--http-port", type=int, default=8000, help="HTTP/REST port (default 8000)")
    p.add_argument("--grpc-port", type=int, default=8001, help="gRPC port (default 8001)")
    p.add_argument("--metrics-port", type=int, default=8002, help="Prometheus metrics port (default 8002)")
    p.add_argument("--model-control-mode", default="none", choices=["none", "explicit"],
                   help="none (default): load every model at start, refuse load/unload requests; explicit: load "
                        "only --load-model ones, take load/unload requests")
    p.add_argument("--load-model", action="append", default=[], metavar="NAME",
                   help="with --model-control-mode explicit: a model to load at start (repeatable; * for all)")
    p.add_argument("--gpu-device", default="cuda", choices=["cuda", "sim"],
                   help="what KIND_GPU instances run on: cuda (default) or sim, the simulated GPU (for tests)")
    p.add_argument("--max-request-size", type=int, default=256 << 20, metavar="BYTES",
                   help="largest request body (HTTP) or message (gRPC) accepted (default 256 MiB)")
    p.add_argument("--drain-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="how long requests in flight may take to finish on shutdown (default 30)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=run)


def _port(value: int) -> int | None:
    return None if value < 0 else value


def run(args) -> int:
    try:
        from twinfer.serve.server import Server
    except ImportError as e:
        print(f"twinfer serve: needs the [serve] extra (pip install 'twinfer[serve]'): {e}", file=sys.stderr)
        return 1
    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("uvicorn").setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        server = Server(args.model_repository, host=args.host, http_port=_port(args.http_port),
                        grpc_port=_port(args.grpc_port), metrics_port=_port(args.metrics_port),
                        control_mode=args.model_control_mode, load_models=args.load_model,
                        gpu_device=args.gpu_device, max_request_bytes=args.max_request_size,
                        drain_timeout=args.drain_timeout)
        server.start()
    except OSError as e:
        print(f"twinfer serve: {e}", file=sys.stderr)
        return 1

    # The handler only records the signal: one arriving while it runs (GNU
    # timeout sends SIGTERM to the process and to its group, so two land at
    # once) runs the handler again inside itself, and a handler that takes a
    # lock, as threading.Event.set does, then waits for itself forever; even
    # signal.signal(), Python code, recursed without end under a stream of
    # signals. The loop below polls the record instead.
    received: list[int] = []

    def on_signal(signum, frame):
        # A second Ctrl-C stops at once (exit status 130, as any Ctrl-C
        # outside a drain); a second SIGTERM, as timeout sends, lets the drain finish.
        if signum == signal.SIGINT and received:
            raise KeyboardInterrupt
        received.append(signum)  # takes no lock: safe to re-enter

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    endpoints = [f"{what} on {args.host}:{port}" for what, port in
                 (("HTTP", server.http_port), ("gRPC", server.grpc_port), ("metrics", server.metrics_port))
                 if port is not None]
    for row in server.repository.index():
        print(f"  {row['name']:<24} {row['version'] or '-':>4}  {row['state']}  {row['reason']}".rstrip())
    print(f"twinfer serve: ready; {', '.join(endpoints)} (Ctrl-C stops)", flush=True)
    while not received:
        if not server.running:
            print("twinfer serve: the server stopped unexpectedly (see the log)", file=sys.stderr)
            return 1
        time.sleep(0.2)  # a signal's handler runs during the sleep, which then goes on to its end
    print("twinfer serve: draining requests in flight, then stopping", flush=True)
    server.stop()
    # Drained: a signal from now on (another of timeout's, say) must not turn
    # the exit status 0 into death by signal while Python shuts down, which
    # restores the default action of the signals it handled.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("twinfer serve: stopped", flush=True)
    return 0
