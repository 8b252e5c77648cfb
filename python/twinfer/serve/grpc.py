"""The KServe v2 gRPC front end: grpcio's asyncio server with the
GRPCInferenceService servicer generated from the protocol's published protos
(they ship with tritonclient), so tritonclient.grpc works unchanged.

Each RPC decodes its message into an InferenceService call and encodes the
answer; a ServeError becomes the status code it names (errors.py).
"""

from __future__ import annotations

import logging
import time

import grpc
import numpy as np
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from .errors import InvalidRequest, ServeError
from .inference import InferenceService, InferRequest, InferResponse
from .tensors import dtype_of, from_bytes, from_json, to_bytes

log = logging.getLogger("twinfer.serve")

# The typed "contents" field that carries each datatype when raw bytes are not used.
_CONTENTS_FIELD = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
    "UINT64": "uint64_contents", "FP32": "fp32_contents", "FP64": "fp64_contents",
}


def _rpc(method):
    """Turn the ServeErrors of one RPC into its status code and message."""

    async def handler(self, request, context):
        try:
            return await method(self, request, context)
        except ServeError as e:
            await context.abort(getattr(grpc.StatusCode, e.grpc_code), str(e))
        except Exception as e:  # noqa: BLE001 - an unexpected failure is that request's, not the server's
            if isinstance(e, grpc.aio.AbortError):
                raise
            log.exception("internal error in %s", method.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(e).__name__}: {e}")

    handler.__name__ = method.__name__
    return handler


def _unsupported(what: str):
    async def handler(self, request, context):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{what} is not supported by twinfer")

    return handler


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, service: InferenceService):
        self.service = service

    @_rpc
    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    @_rpc
    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=self.service.ready)

    @_rpc
    async def ModelReady(self, request, context):
        return pb.ModelReadyResponse(ready=self.service.model_ready(request.name, request.version))

    @_rpc
    async def ServerMetadata(self, request, context):
        return pb.ServerMetadataResponse(**self.service.server_metadata())

    @_rpc
    async def ModelMetadata(self, request, context):
        meta = self.service.model_metadata(request.name, request.version)
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=meta["name"], versions=meta["versions"], platform=meta["platform"],
            inputs=[tensor(**t) for t in meta["inputs"]], outputs=[tensor(**t) for t in meta["outputs"]])

    @_rpc
    async def ModelConfig(self, request, context):
        return pb.ModelConfigResponse(config=self.service.model_config(request.name, request.version))

    @_rpc
    async def ModelStatistics(self, request, context):
        stats = self.service.statistics(request.name, request.version)
        return json_format.ParseDict({"model_stats": stats}, pb.ModelStatisticsResponse())

    @_rpc
    async def RepositoryIndex(self, request, context):
        rows = self.service.repository_index(request.ready)
        return pb.RepositoryIndexResponse(models=[pb.RepositoryIndexResponse.ModelIndex(**r) for r in rows])

    @_rpc
    async def RepositoryModelLoad(self, request, context):
        files = [k for k in request.parameters if k.startswith("file:")]
        if files:
            raise InvalidRequest(f"loading model files sent with the request ({files}) is not supported; put them "
                                 "in the repository")
        config = request.parameters["config"].string_param if "config" in request.parameters else None
        await self.service.load(request.model_name, config or None)
        return pb.RepositoryModelLoadResponse()

    @_rpc
    async def RepositoryModelUnload(self, request, context):
        await self.service.unload(request.model_name)
        return pb.RepositoryModelUnloadResponse()

    @_rpc
    async def ModelInfer(self, request, context):
        response = await self.service.infer(_infer_request(request, time.monotonic_ns()))
        return _infer_response(response)

    async def ModelStreamInfer(self, request_iterator, context):
        # One answer per request, in order; an error is reported in the
        # stream's error_message and the stream goes on, as Triton does.
        async for request in request_iterator:
            try:
                response = await self.service.infer(_infer_request(request, time.monotonic_ns()))
                yield pb.ModelStreamInferResponse(infer_response=_infer_response(response))
            except ServeError as e:
                yield pb.ModelStreamInferResponse(error_message=str(e))
            except Exception as e:  # noqa: BLE001 - that request's failure, the stream goes on
                log.exception("internal error in ModelStreamInfer")
                yield pb.ModelStreamInferResponse(error_message=f"internal error: {type(e).__name__}: {e}")

    SystemSharedMemoryStatus = _unsupported("system shared memory")
    SystemSharedMemoryRegister = _unsupported("system shared memory")
    SystemSharedMemoryUnregister = _unsupported("system shared memory")
    CudaSharedMemoryStatus = _unsupported("CUDA shared memory")
    CudaSharedMemoryRegister = _unsupported("CUDA shared memory")
    CudaSharedMemoryUnregister = _unsupported("CUDA shared memory")
    TraceSetting = _unsupported("tracing")
    LogSettings = _unsupported("log settings")


def _param(params, key: str):
    if key not in params:
        return None
    p = params[key]
    which = p.WhichOneof("parameter_choice")
    return getattr(p, which) if which else None


def _infer_request(request: pb.ModelInferRequest, received_ns: int) -> InferRequest:
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise InvalidRequest(f"raw_input_contents has {len(raw)} entries for {len(request.inputs)} inputs")
    tensors: dict[str, tuple[str, np.ndarray]] = {}
    for i, t in enumerate(request.inputs):
        if t.name in tensors:
            raise InvalidRequest(f"input {t.name!r} is given twice")
        if "shared_memory_region" in t.parameters:
            raise InvalidRequest(f"input {t.name!r}: shared memory is not supported by twinfer; send the data")
        if raw:
            array = from_bytes(t.name, t.datatype, list(t.shape), raw[i])
        else:
            dtype_of(t.datatype)  # BYTES / unknown types: the clear error first
            field = _CONTENTS_FIELD.get(t.datatype)
            if field is None:
                raise InvalidRequest(f"input {t.name!r}: {t.datatype} data must come in raw_input_contents")
            array = from_json(t.name, t.datatype, list(t.shape), list(getattr(t.contents, field)))
        tensors[t.name] = (t.datatype, array)
    for o in request.outputs:
        if "classification" in o.parameters:
            raise InvalidRequest(f"output {o.name!r}: the classification extension is not supported")
        if "shared_memory_region" in o.parameters:
            raise InvalidRequest(f"output {o.name!r}: shared memory is not supported by twinfer")
    timeout = _param(request.parameters, "timeout")
    if timeout is not None and (not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 0):
        raise InvalidRequest(f"parameter timeout must be microseconds (an integer >= 0), got {timeout!r}")
    outputs = [o.name for o in request.outputs] or None
    return InferRequest(request.model_name, request.model_version, request.id, tensors, outputs, timeout,
                        received_ns)


def _infer_response(response: InferResponse) -> pb.ModelInferResponse:
    out = pb.ModelInferResponse(model_name=response.model, model_version=response.version, id=response.id)
    for name, datatype, array in response.outputs:
        out.outputs.add(name=name, datatype=datatype, shape=list(array.shape))
        out.raw_output_contents.append(to_bytes(array))
    return out


def create_server(service: InferenceService, address: str, max_request_bytes: int) -> tuple[grpc.aio.Server, int]:
    """The gRPC server for ``service`` bound to ``address`` ("host:port", port 0
    for any free one), not started; and the port it bound."""
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", max_request_bytes),
                                      ("grpc.max_send_message_length", -1)])
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(InferenceServicer(service), server)
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot bind the gRPC server to {address}")
    return server, port
