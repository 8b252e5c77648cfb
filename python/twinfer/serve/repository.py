"""A model repository in Triton's layout, and the models loaded from it.

    <repository>/<model>/config.pbtxt
    <repository>/<model>/<version>/model.onnx   (or model.twinfer, a saved engine)

Each model loads on its own: a broken configuration or file makes that model
UNAVAILABLE, with the reason in the repository index, and the others load.
A reload builds the new versions first and swaps them in only when all
loaded, so a failed reload leaves the running versions serving. Unloading
stops new requests at once and lets queued ones finish.

Model control follows Triton's modes: "none" loads every model at start and
refuses load/unload requests; "explicit" loads only the models named at start
("*" for all) and takes load/unload requests.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .config import ModelConfig, config_from_json, read_config, settings_from_config
from .errors import InvalidRequest, ModelLoadError, NotFound, Unavailable
from .metrics import ServerMetrics
from .model import ServedVersion

log = logging.getLogger("twinfer.serve")

CONTROL_MODES = ("none", "explicit")


@dataclass
class _ModelState:
    versions: dict[int, ServedVersion] = field(default_factory=dict)
    state: str = "UNAVAILABLE"  # READY, UNAVAILABLE, LOADING, UNLOADING
    reason: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)  # one load/unload of this model at a time


def _versions_on_disk(model_dir: Path) -> list[int]:
    return sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())


def _select_versions(name: str, policy: tuple, available: list[int]) -> list[int]:
    if not available:
        raise ModelLoadError(f"model {name!r}: no version folder (a number, e.g. {name}/1/model.onnx)")
    if policy[0] == "all":
        return available
    if policy[0] == "specific":
        missing = [v for v in policy[1] if v not in available]
        if missing:
            raise ModelLoadError(f"model {name!r}: version_policy.specific.versions: no folder for version(s) "
                                 f"{missing}; the versions on disk are {available}")
        return sorted(policy[1])
    return available[-policy[1]:]


class ModelRepository:
    """The models of one repository folder and their loaded versions."""

    def __init__(self, root: str | Path, *, control_mode: str = "none", gpu_device: str = "cuda",
                 metrics: ServerMetrics | None = None):
        self.root = Path(root)
        if not self.root.is_dir():
            raise NotADirectoryError(f"model repository {self.root} is not a folder")
        if control_mode not in CONTROL_MODES:
            raise ValueError(f"model control mode must be one of {CONTROL_MODES}, got {control_mode!r}")
        if gpu_device not in ("cuda", "sim"):
            raise ValueError(f"gpu_device must be 'cuda' or 'sim', got {gpu_device!r}")
        self.control_mode = control_mode
        self.gpu_device = gpu_device
        self.metrics = metrics
        self._lock = threading.Lock()  # guards _models (the dict, not the loads)
        self._models: dict[str, _ModelState] = {}

    # -- the folder -------------------------------------------------------------------
    def model_names(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))

    def _is_model_dir(self, name: str) -> bool:
        """Whether ``name`` is a model folder of the repository: one plain name
        (no "", ".", "..", separators or absolute paths, which would reach
        folders outside it)."""
        return (bool(name) and "/" not in name and "\\" not in name and not name.startswith(".")
                and (self.root / name).is_dir())

    def _state(self, name: str) -> _ModelState:
        with self._lock:
            return self._models.setdefault(name, _ModelState())

    # -- loading ----------------------------------------------------------------------
    def load_startup_models(self, names: list[str] | None = None) -> None:
        """Mode "none": every model. Mode "explicit": ``names`` ("*" = all).
        A model that fails is logged and left UNAVAILABLE."""
        if self.control_mode == "none" or (names and "*" in names):
            names = self.model_names()
        for name in names or []:
            try:
                self.load(name, _startup=True)
            except (ModelLoadError, NotFound) as e:
                log.error("%s", e)

    def load(self, name: str, config_json: str | None = None, *, _startup: bool = False) -> None:
        """Load (or reload) every version of ``name`` its version policy
        selects. ``config_json``: a configuration to use instead of config.pbtxt."""
        if not _startup and self.control_mode != "explicit":
            raise InvalidRequest("loading and unloading models needs the server started with "
                                 "--model-control-mode explicit")
        model_dir = self.root / name
        if not self._is_model_dir(name):
            raise NotFound(f"model {name!r} is not in the repository {self.root}")
        state = self._state(name)
        with state.lock:
            previous = state.versions
            if not previous:
                state.state, state.reason = "LOADING", ""
            try:
                try:
                    loaded = self._load_versions(name, model_dir, config_json)
                except ModelLoadError:
                    raise
                except Exception as e:  # noqa: BLE001 - whatever one model's files do, it is that model's failure
                    log.exception("model %r failed to load", name)
                    raise ModelLoadError(f"model {name!r}: {type(e).__name__}: {e}") from None
            except ModelLoadError as e:
                if not previous:
                    state.state, state.reason = "UNAVAILABLE", str(e)
                else:
                    state.reason = f"reload failed, previous versions still serving: {e}"
                raise
            state.versions, state.state, state.reason = loaded, "READY", ""
        for served in previous.values():
            served.close(drain=True)

    def _load_versions(self, name: str, model_dir: Path, config_json: str | None) -> dict[int, ServedVersion]:
        config = config_from_json(name, config_json) if config_json else read_config(model_dir)
        settings = settings_from_config(config, model_dir)
        loaded: dict[int, ServedVersion] = {}
        try:
            for version in _select_versions(name, settings.version_policy, _versions_on_disk(model_dir)):
                # Each version completes its own copy (inputs/outputs from its file).
                own = ModelConfig()
                own.CopyFrom(config)
                loaded[version] = ServedVersion(model_dir, version, own, settings_from_config(own, model_dir),
                                                self.gpu_device, self.metrics)
        except BaseException:
            for served in loaded.values():
                served.close(drain=False)
            raise
        return loaded

    def unload(self, name: str) -> None:
        """Stop serving ``name``: new requests are refused at once, queued ones finish."""
        if self.control_mode != "explicit":
            raise InvalidRequest("loading and unloading models needs the server started with "
                                 "--model-control-mode explicit")
        with self._lock:
            state = self._models.get(name)
        if state is None or not state.versions:
            if not self._is_model_dir(name):
                raise NotFound(f"model {name!r} is not in the repository {self.root}")
            return  # not loaded: nothing to do, as in Triton
        with state.lock:
            versions, state.versions = state.versions, {}
            state.state, state.reason = "UNLOADING", ""
            for served in versions.values():
                served.close(drain=True)
            state.state, state.reason = "UNAVAILABLE", "unloaded"

    def close(self) -> None:
        """Unload everything (queued requests finish first)."""
        with self._lock:
            states = list(self._models.values())
        for state in states:
            with state.lock:
                versions, state.versions = state.versions, {}
                state.state, state.reason = "UNAVAILABLE", "server stopped"
            for served in versions.values():
                served.close(drain=True)

    # -- lookup -----------------------------------------------------------------------
    def get(self, name: str, version: str = "") -> ServedVersion:
        """The served version (the newest loaded when ``version`` is "")."""
        with self._lock:
            state = self._models.get(name)
        versions = dict(state.versions) if state is not None else {}
        if not versions:
            if state is None and not self._is_model_dir(name):
                raise NotFound(f"unknown model {name!r}; the repository has {self.model_names()}")
            reason = state.reason if state is not None and state.reason else "not loaded"
            raise Unavailable(f"model {name!r} is not ready: {reason}")
        if not version:
            return versions[max(versions)]
        if not (version.isascii() and version.isdigit()) or int(version) not in versions:
            raise NotFound(f"model {name!r} has no version {version!r} loaded; its loaded versions are "
                           f"{sorted(versions)}")
        return versions[int(version)]

    def loaded(self) -> list[ServedVersion]:
        with self._lock:
            states = list(self._models.values())
        return [v for s in states for _, v in sorted(s.versions.items())]

    def versions_of(self, name: str) -> list[str]:
        with self._lock:
            state = self._models.get(name)
        return [str(v) for v in sorted(state.versions)] if state is not None else []

    def index(self, ready_only: bool = False) -> list[dict]:
        """Every model of the folder (and each loaded version): name, version, state, reason."""
        rows = []
        with self._lock:
            states = dict(self._models)
        for name in sorted(set(self.model_names()) | set(states)):
            state = states.get(name)
            if state is not None and state.versions:
                rows += [{"name": name, "version": str(v), "state": "READY", "reason": state.reason}
                         for v in sorted(state.versions)]
            elif not ready_only:
                row = {"name": name, "version": "", "state": state.state if state else "UNAVAILABLE",
                       "reason": state.reason if state else "not loaded"}
                rows.append(row)
        return rows

    def memory_rows(self):
        for served in self.loaded():
            yield from served.memory_rows()

    def queue_rows(self):
        for served in self.loaded():
            yield served.name, served.version, served.batcher.stats()["queued"]
