"""What the server does, apart from how requests travel: the KServe v2
operations (health, metadata, configuration, inference, repository,
statistics) over the repository. http.py and grpc.py decode their wire
format into these calls and encode the answers; neither decides anything."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from .._version import __version__
from .config import ModelConfig, config_to_dict
from .errors import NotFound, ServeError, VersionClosed
from .repository import ModelRepository
from .tensors import datatype_of

SERVER_NAME = "twinfer"
EXTENSIONS = ["binary_tensor_data", "model_repository", "model_configuration", "statistics", "schedule_policy",
              "parameters"]


@dataclass
class InferRequest:
    model: str
    version: str
    id: str
    inputs: dict[str, tuple[str, np.ndarray]]  # name -> (datatype, array)
    outputs: list[str] | None  # None: all
    timeout_us: int | None  # the request's "timeout" parameter
    received_ns: int  # time.monotonic_ns() when it arrived


@dataclass
class InferResponse:
    model: str
    version: str
    id: str
    outputs: list[tuple[str, str, np.ndarray]]  # (name, datatype, array)


class InferenceService:
    """The server's operations; ``ready`` is False until every startup model
    was tried, and again once the server starts draining."""

    def __init__(self, repository: ModelRepository):
        self.repository = repository
        self.ready = False

    def server_metadata(self) -> dict:
        return {"name": SERVER_NAME, "version": __version__, "extensions": list(EXTENSIONS)}

    def model_metadata(self, name: str, version: str = "") -> dict:
        served = self.repository.get(name, version)
        inputs, outputs = served.tensor_metadata()
        return {"name": served.name, "versions": self.repository.versions_of(name), "platform": served.platform,
                "inputs": inputs, "outputs": outputs}

    def model_ready(self, name: str, version: str = "") -> bool:
        try:
            self.repository.get(name, version)
        except ServeError:
            return False
        return True

    def model_config(self, name: str, version: str = "") -> ModelConfig:
        return self.repository.get(name, version).config

    def model_config_dict(self, name: str, version: str = "") -> dict:
        return config_to_dict(self.model_config(name, version))

    async def infer(self, request: InferRequest) -> InferResponse:
        served = self.repository.get(request.model, request.version)
        for attempt in range(2):
            try:
                feeds = served.check_inputs(request.inputs)
                names = served.check_outputs(request.outputs)
            except ServeError:
                served.record_request(False, request.received_ns)
                raise
            try:
                results = await served.infer(feeds, names, served.timeout_for(request.timeout_us),
                                             request.received_ns)
                break
            except VersionClosed:
                # A reload swapped versions while this request was on its way:
                # once more on the new one (an unload raises from get()). The
                # closed version did not count it; whichever answers does.
                try:
                    now = self.repository.get(request.model, request.version)
                except ServeError:
                    served.record_request(False, request.received_ns)
                    raise
                if attempt or now is served:
                    served.record_request(False, request.received_ns)
                    raise
                served = now
        outputs = [(name, datatype_of(served.outputs[name].dtype), results[name]) for name in names]
        return InferResponse(served.name, served.version, request.id, outputs)

    def statistics(self, name: str = "", version: str = "") -> list[dict]:
        if not name:
            if version:
                raise NotFound("statistics for a version need the model's name")
            return [served.stats.to_dict() for served in self.repository.loaded()]
        if version:
            return [self.repository.get(name, version).stats.to_dict()]
        self.repository.get(name)  # unknown / not ready: the same error as inference
        return [v.stats.to_dict() for v in self.repository.loaded() if v.name == name]

    def repository_index(self, ready_only: bool = False) -> list[dict]:
        return self.repository.index(ready_only)

    async def load(self, name: str, config_json: str | None = None) -> None:
        # Loading compiles engines: a thread keeps the event loop serving meanwhile.
        await asyncio.to_thread(self.repository.load, name, config_json)

    async def unload(self, name: str) -> None:
        await asyncio.to_thread(self.repository.unload, name)
