"""The KServe v2 HTTP/REST front end (a Starlette app, run by uvicorn).

Routes and bodies are those Triton serves, so tritonclient.http works
unchanged: JSON tensors ("data") and the binary tensor extension (the JSON
header's length in Inference-Header-Content-Length, then each binary tensor's
bytes in order, sized by its "binary_data_size" parameter). Errors are JSON
{"error": message} with the status of the ServeError (errors.py).
"""

from __future__ import annotations

import json
import logging
import time
import zlib

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .errors import InvalidRequest, RequestTooLarge, ServeError
from .inference import InferenceService, InferRequest, InferResponse
from .tensors import from_bytes, from_json, to_bytes, to_json

log = logging.getLogger("twinfer.serve")

HEADER_LENGTH = "Inference-Header-Content-Length"


def create_app(service: InferenceService, max_request_bytes: int) -> Starlette:
    """The HTTP app over ``service``; request bodies above ``max_request_bytes`` get 413."""

    def model_route(path: str, endpoint, methods: list[str]) -> list[Route]:
        return [Route("/v2/models/{model}" + path, endpoint, methods=methods),
                Route("/v2/models/{model}/versions/{version}" + path, endpoint, methods=methods)]

    def names(request: Request) -> tuple[str, str]:
        return request.path_params["model"], request.path_params.get("version", "")

    async def live(request: Request) -> Response:
        return Response(status_code=200)

    async def ready(request: Request) -> Response:
        return Response(status_code=200 if service.ready else 503)

    async def server_metadata(request: Request) -> Response:
        return JSONResponse(service.server_metadata())

    async def model_metadata(request: Request) -> Response:
        return JSONResponse(service.model_metadata(*names(request)))

    async def model_ready(request: Request) -> Response:
        return Response(status_code=200 if service.model_ready(*names(request)) else 400)

    async def model_config(request: Request) -> Response:
        return JSONResponse(service.model_config_dict(*names(request)))

    async def statistics(request: Request) -> Response:
        model = request.path_params.get("model", "")
        return JSONResponse({"model_stats": service.statistics(model, request.path_params.get("version", ""))})

    async def infer(request: Request) -> Response:
        received_ns = time.monotonic_ns()
        try:
            body = await _read_body(request, max_request_bytes)
        except ClientDisconnect:
            log.info("a client disconnected while sending a request to %s", request.url.path)
            return Response(status_code=400)  # nobody reads it; the server goes on
        model, version = names(request)
        parsed = _parse_infer(body, request.headers.get(HEADER_LENGTH), model, version, received_ns)
        response = await service.infer(parsed.request)
        return _infer_response(response, parsed)

    async def repository_index(request: Request) -> Response:
        doc = _json_object(await _read_body(request, max_request_bytes), allow_empty=True)
        return JSONResponse(service.repository_index(bool(doc.get("ready", False))))

    async def load(request: Request) -> Response:
        doc = _json_object(await _read_body(request, max_request_bytes), allow_empty=True)
        params = doc.get("parameters") or {}
        if not isinstance(params, dict):
            raise InvalidRequest("'parameters' must be a JSON object")
        files = [k for k in params if k.startswith("file:")]
        if files:
            raise InvalidRequest(f"loading model files sent with the request ({files}) is not supported; put them "
                                 "in the repository")
        config = params.get("config")
        if config is not None and not isinstance(config, str):
            raise InvalidRequest("parameters.config must be the model configuration as a JSON string")
        await service.load(request.path_params["model"], config)
        return Response(status_code=200)

    async def unload(request: Request) -> Response:
        _json_object(await _read_body(request, max_request_bytes), allow_empty=True)
        await service.unload(request.path_params["model"])
        return Response(status_code=200)

    routes = [
        Route("/v2/health/live", live, methods=["GET"]),
        Route("/v2/health/ready", ready, methods=["GET"]),
        Route("/v2", server_metadata, methods=["GET"]),
        Route("/v2/models/stats", statistics, methods=["GET"]),
        *model_route("/stats", statistics, ["GET"]),
        *model_route("", model_metadata, ["GET"]),
        *model_route("/ready", model_ready, ["GET"]),
        *model_route("/config", model_config, ["GET"]),
        *model_route("/infer", infer, ["POST"]),
        Route("/v2/repository/index", repository_index, methods=["POST"]),
        Route("/v2/repository/models/{model}/load", load, methods=["POST"]),
        Route("/v2/repository/models/{model}/unload", unload, methods=["POST"]),
    ]
    handlers = {ServeError: _serve_error, HTTPException: _http_error, Exception: _internal_error}
    return Starlette(routes=routes, exception_handlers=handlers,
                     middleware=[Middleware(GZipMiddleware, minimum_size=1024)])


# -- errors ---------------------------------------------------------------------------------
async def _serve_error(request: Request, exc: ServeError) -> Response:
    return JSONResponse({"error": str(exc)}, status_code=exc.http_status)


async def _http_error(request: Request, exc: HTTPException) -> Response:
    message = exc.detail if exc.status_code != 404 else f"no such endpoint: {request.method} {request.url.path}"
    return JSONResponse({"error": message}, status_code=exc.status_code, headers=exc.headers)


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("internal error answering %s %s", request.method, request.url.path)
    return JSONResponse({"error": f"internal error: {type(exc).__name__}: {exc}"}, status_code=500)


# -- bodies -------------------------------------------------------------------------------------
# What is read past the limit before answering 413, so that the client, still
# sending, is not cut off before it can read the answer.
_DISCARD_LIMIT = 64 << 20


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and not declared.isdigit():
        raise InvalidRequest(f"Content-Length {declared!r} is not a number")
    chunks, total = [], 0
    too_large = declared is not None and int(declared) > limit
    if not (too_large and int(declared) > limit + _DISCARD_LIMIT):
        async for chunk in request.stream():
            total += len(chunk)
            if total > limit:
                too_large = True
                chunks.clear()
                if total > limit + _DISCARD_LIMIT:
                    break
            elif not too_large:
                chunks.append(chunk)
    if too_large:
        size = declared if declared is not None else f"more than {limit}"
        raise RequestTooLarge(f"the request body ({size} bytes) is larger than the server's limit of {limit} "
                              "bytes (twinfer serve --max-request-size)")
    body = b"".join(chunks)
    encoding = (request.headers.get("content-encoding") or "identity").lower()
    if encoding == "identity":
        return body
    if encoding not in ("gzip", "deflate"):
        raise InvalidRequest(f"Content-Encoding {encoding!r} is not supported (gzip, deflate)")
    inflater = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as e:
        raise InvalidRequest(f"the {encoding} body cannot be decompressed: {e}") from None
    if len(out) > limit:
        raise RequestTooLarge(f"the decompressed request body is larger than the server's limit of {limit} bytes")
    return out


def _json_object(data: bytes, allow_empty: bool = False) -> dict:
    if allow_empty and not data.strip():
        return {}
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidRequest(f"malformed JSON in the request: {e}") from None
    except RecursionError:
        raise InvalidRequest("malformed JSON in the request: nested too deeply") from None
    if not isinstance(doc, dict):
        raise InvalidRequest(f"the request must be a JSON object, not {type(doc).__name__}")
    return doc


class _ParsedInfer:
    def __init__(self, request: InferRequest, binary_choice: dict[str, bool], binary_default: bool):
        self.request = request
        self.binary_choice = binary_choice  # outputs whose request says binary_data true / false
        self.binary_default = binary_default  # the request's binary_data_output

    def wants_binary(self, name: str) -> bool:
        return self.binary_choice.get(name, self.binary_default)


def _parse_infer(body: bytes, header_length: str | None, model: str, version: str,
                 received_ns: int) -> _ParsedInfer:
    if header_length is None:
        header, binary = body, memoryview(b"")
    else:
        if not (header_length.isascii() and header_length.isdigit()) or int(header_length) > len(body):
            raise InvalidRequest(f"{HEADER_LENGTH} {header_length!r} is not a length within the body "
                                 f"({len(body)} bytes)")
        n = int(header_length)
        header, binary = body[:n], memoryview(body)[n:]
    doc = _json_object(header)
    params = _dict_field(doc, "parameters", "the request")
    inputs = doc.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise InvalidRequest("'inputs' must be a non-empty list")
    tensors, offset = {}, 0
    for i, item in enumerate(inputs):
        if not isinstance(item, dict):
            raise InvalidRequest(f"inputs[{i}] must be a JSON object")
        name, datatype, shape = item.get("name"), item.get("datatype"), item.get("shape")
        if not isinstance(name, str) or not isinstance(datatype, str) or not isinstance(shape, list):
            raise InvalidRequest(f"inputs[{i}] needs 'name' (string), 'datatype' (string) and 'shape' (list)")
        if name in tensors:
            raise InvalidRequest(f"input {name!r} is given twice")
        p = _dict_field(item, "parameters", f"input {name!r}")
        if "shared_memory_region" in p:
            raise InvalidRequest(f"input {name!r}: shared memory is not supported by twinfer; send the data")
        size = p.get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or size < 0 or offset + size > len(binary):
                raise InvalidRequest(f"input {name!r}: binary_data_size {size!r} runs past the "
                                     f"{len(binary)} bytes of binary data")
            array = from_bytes(name, datatype, shape, binary[offset:offset + size])
            offset += size
        elif "data" in item:
            array = from_json(name, datatype, shape, item["data"])
        else:
            raise InvalidRequest(f"input {name!r} has no data: give 'data' or the binary_data_size parameter")
        tensors[name] = (datatype, array)
    if offset != len(binary):
        raise InvalidRequest(f"{len(binary) - offset} bytes of binary data follow the last binary input")
    requested, binary_choice = None, {}
    if doc.get("outputs") is not None:
        if not isinstance(doc["outputs"], list):
            raise InvalidRequest("'outputs' must be a list")
        requested = []
        for i, item in enumerate(doc["outputs"]):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise InvalidRequest(f"outputs[{i}] must be an object with a 'name'")
            p = _dict_field(item, "parameters", f"output {item['name']!r}")
            if p.get("classification"):
                raise InvalidRequest(f"output {item['name']!r}: the classification extension is not supported")
            if "shared_memory_region" in p:
                raise InvalidRequest(f"output {item['name']!r}: shared memory is not supported by twinfer")
            requested.append(item["name"])
            if "binary_data" in p:
                binary_choice[item["name"]] = bool(p["binary_data"])
    timeout = params.get("timeout")
    if timeout is not None and (not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 0):
        raise InvalidRequest(f"parameters.timeout must be microseconds (an integer >= 0), got {timeout!r}")
    request_id = doc.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidRequest("'id' must be a string")
    request = InferRequest(model, version, request_id, tensors, requested, timeout, received_ns)
    return _ParsedInfer(request, binary_choice, bool(params.get("binary_data_output", False)))


def _dict_field(doc: dict, key: str, what: str) -> dict:
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidRequest(f"{what}: '{key}' must be a JSON object")
    return value


def _infer_response(response: InferResponse, parsed: _ParsedInfer) -> Response:
    outputs, blobs = [], []
    for name, datatype, array in response.outputs:
        entry = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if parsed.wants_binary(name):
            data = to_bytes(array)
            entry["parameters"] = {"binary_data_size": len(data)}
            blobs.append(data)
        else:
            entry["data"] = to_json(array)
        outputs.append(entry)
    doc = {"model_name": response.model, "model_version": response.version, "outputs": outputs}
    if response.id:
        doc["id"] = response.id
    header = json.dumps(doc).encode()
    if not blobs:
        return Response(header, media_type="application/json")
    return Response(b"".join([header, *blobs]), media_type="application/octet-stream",
                    headers={HEADER_LENGTH: str(len(header))})
