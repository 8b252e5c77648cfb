"""Calibration: run the float model over sample inputs and choose a range for
every activation that a quantized op would read.

>>> cal = twinfer.quantize.calibrate("model.onnx", data, calibrator="entropy")
>>> cal.save("model.calib.json"); cal = twinfer.quantize.Calibration.load("model.calib.json")
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from ..errors import InvalidArgumentError
from .observers import ChannelMeanObserver, HistogramObserver, MinMaxObserver

CALIBRATORS = ("minmax", "percentile", "entropy")
# Ops whose data inputs an INT8 engine quantizes (weights are quantized per
# output channel from the weights themselves, not calibrated).
QUANTIZABLE = {"Conv": (0,), "ConvTranspose": (0,), "Gemm": (0,), "MatMul": (0, 1)}


@dataclass
class Calibration:
    """Per-tensor activation ranges: {value name: amax}, with how they were
    chosen. An activation never seen negative (``observed`` min >= 0, a ReLU's
    output) runs as uint8 with scale amax / 255; any other as symmetric int8
    with scale amax / 127. Saved as JSON, so an engine can be rebuilt later
    without the calibration data."""

    method: str
    amax: dict[str, float]
    observed: dict[str, tuple[float, float]] = field(default_factory=dict)  # (min, max) seen
    samples: int = 0
    percentile: float | None = None
    # Per-channel means (Conv inputs along axis 1, Gemm/MatMul inputs along
    # the last axis): the int8 build subtracts each layer's weight-rounding
    # shift from its bias with them (bias correction).
    channel_mean: dict[str, list[float]] = field(default_factory=dict)

    def unsigned(self) -> set[str]:
        """The activations quantized as uint8: those calibration never saw negative."""
        return {n for n in self.amax if n in self.observed and self.observed[n][0] >= 0}

    def scale(self, name: str) -> float:
        return max(self.amax[name], 1e-12) / (255.0 if name in self.unsigned() else 127.0)

    def to_dict(self) -> dict:
        return {"format": "twinfer.calibration/1", "method": self.method, "percentile": self.percentile,
                "samples": self.samples, "amax": self.amax, "observed": {k: list(v) for k, v in self.observed.items()},
                "channel_mean": self.channel_mean}

    def save(self, path: str | os.PathLike) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)

    @classmethod
    def from_dict(cls, d: dict) -> "Calibration":
        if d.get("format") != "twinfer.calibration/1":
            raise InvalidArgumentError("not a twinfer calibration file")
        return cls(method=d["method"], amax={k: float(v) for k, v in d["amax"].items()},
                   observed={k: tuple(v) for k, v in d.get("observed", {}).items()},
                   samples=int(d.get("samples", 0)), percentile=d.get("percentile"),
                   channel_mean={k: [float(x) for x in v] for k, v in d.get("channel_mean", {}).items()})

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Calibration":
        with open(path) as f:
            return cls.from_dict(json.load(f))

    def __repr__(self) -> str:
        return f"<twinfer.quantize.Calibration {self.method}, {len(self.amax)} tensors, {self.samples} samples>"


def quantizable_activations(model) -> list[str]:
    """Names of the non-constant values the quantizable ops read, in graph order."""
    return list(_activation_channel_axes(model))


def _activation_channel_axes(model) -> dict[str, int | None]:
    """The non-constant values the quantizable ops read, in graph order, each
    with the axis its reader contracts over (Conv: 1, Gemm/MatMul input A: -1),
    or None when its readers disagree or it is a MatMul's B."""
    from .. import _core
    from .._source import model_source

    source, is_path, base_dir = model_source(model)
    info = _core.read_model_info(source, is_path, base_dir)
    axes: dict[str, int | None] = {}
    nodes = [(op, ins, outs) for (_, op, domain), (ins, outs) in zip(info["nodes"], info["node_io"])
             if domain in ("", "ai.onnx")]
    for op, ins, _ in nodes:
        if op not in QUANTIZABLE:
            continue
        for k in QUANTIZABLE[op]:
            if k < len(ins):
                name, const = ins[k]
                if name and not const:
                    axis = None if k else (1 if op.startswith("Conv") else -1)
                    axes[name] = axis if axes.get(name, axis) == axis else None
    # Residual Adds whose result (or its sole Relu's) a quantized layer reads:
    # the int8 build quantizes their inputs too (insert_qdq's int8_residual_add).
    readers: dict[str, list[str]] = {}
    for op, ins, _ in nodes:
        for name, _ in ins:
            readers.setdefault(name, []).append(op)
    relu_out = {ins[0][0]: outs[0] for op, ins, outs in nodes if op == "Relu" and ins and outs}
    for op, ins, outs in nodes:
        if op != "Add" or len(ins) != 2 or not outs or any(const or not name for name, const in ins):
            continue
        out = outs[0]
        if out not in axes and not (readers.get(out) == ["Relu"] and relu_out.get(out) in axes):
            continue
        for name, _ in ins:
            axes.setdefault(name, None)
    return axes


def _feeds(sample, inputs) -> dict:
    if isinstance(sample, dict):
        return sample
    if isinstance(sample, (list, tuple)):
        return {s.name: x for s, x in zip(inputs, sample)}
    if len(inputs) != 1:
        raise InvalidArgumentError("calibration samples must be feed dicts for a model with several inputs")
    return {inputs[0].name: sample}


def calibrate(model, data: Iterable, calibrator: str = "percentile", percentile: float = 99.99, bins: int = 2048,
              num_threads: int = 0, progress: bool = True, max_samples: int | None = None) -> Calibration:
    """Run the float32 model (on the CPU) over ``data`` — feed dicts, tuples in
    input order, or arrays for a one-input model — and choose each
    quantizable activation's range with ``calibrator``: "minmax", "percentile"
    (|x| at ``percentile``) or "entropy" (KL divergence, as TensorRT)."""
    from tqdm.auto import tqdm

    from .._engine import Engine, open_engine
    from .._source import model_source

    if calibrator not in CALIBRATORS:
        raise InvalidArgumentError(f"calibrator must be one of {CALIBRATORS}, got {calibrator!r}")
    axes = _activation_channel_axes(model)
    names = list(axes)
    if not names:
        raise InvalidArgumentError("the model has no Conv / ConvTranspose / Gemm / MatMul with activation inputs")
    engine = Engine(open_engine(model_source(model), "cpu", num_threads=num_threads, extra_outputs=names))
    observers = {n: (MinMaxObserver() if calibrator == "minmax" else HistogramObserver(bins)) for n in names}
    means = {n: ChannelMeanObserver(a) for n, a in axes.items() if a is not None}
    count = 0
    total = len(data) if hasattr(data, "__len__") else None
    if max_samples is not None and total is not None:
        total = min(total, max_samples)
    with tqdm(total=total, desc="twinfer: calibrating", unit="batch", disable=not progress, leave=False) as bar:
        for sample in data:
            if max_samples is not None and count >= max_samples:
                break
            out = engine.run(_feeds(sample, engine.inputs))
            for n in names:
                x = out[n].numpy()
                observers[n].update(x)
                if n in means:
                    means[n].update(x)
            count += 1
            bar.update(1)
    if count == 0:
        raise InvalidArgumentError("the calibration data is empty")
    amax = {}
    for n, ob in observers.items():
        if calibrator == "minmax":
            amax[n] = ob.amax
        elif calibrator == "percentile":
            amax[n] = ob.percentile(percentile)
        else:
            amax[n] = ob.entropy()
    return Calibration(method=calibrator, amax=amax, observed={n: (o.min, o.max) for n, o in observers.items()},
                       samples=count, percentile=percentile if calibrator == "percentile" else None,
                       channel_mean={n: m.mean for n, m in means.items() if m.mean is not None})
