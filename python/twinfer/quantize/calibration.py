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
from .observers import ChannelAmaxObserver, ChannelMeanObserver, HistogramObserver, MinMaxObserver
from .smoothing import DEFAULT_ALPHA, smoothing_factors

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
    # Token sequences: activations of rank >= 3 that MatMul/Gemm layers with
    # constant weights read (a transformer's hidden states). Their tokens
    # differ in range, so they are quantized per token by default.
    tokens: list[str] = field(default_factory=list)
    # Activation smoothing (quantize/smoothing.py) of the token sequences:
    # the factors s per channel, and the calibrated range of x / s.
    smoothing: dict[str, list[float]] = field(default_factory=dict)
    smoothed_amax: dict[str, float] = field(default_factory=dict)
    smoothing_alpha: float | None = None

    def unsigned(self) -> set[str]:
        """The activations quantized as uint8: those calibration never saw negative."""
        return {n for n in self.amax if n in self.observed and self.observed[n][0] >= 0}

    def scale(self, name: str) -> float:
        return max(self.amax[name], 1e-12) / (255.0 if name in self.unsigned() else 127.0)

    def to_dict(self) -> dict:
        return {"format": "twinfer.calibration/1", "method": self.method, "percentile": self.percentile,
                "samples": self.samples, "amax": self.amax, "observed": {k: list(v) for k, v in self.observed.items()},
                "channel_mean": self.channel_mean, "tokens": self.tokens, "smoothing": self.smoothing,
                "smoothed_amax": self.smoothed_amax, "smoothing_alpha": self.smoothing_alpha}

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
                   channel_mean={k: [float(x) for x in v] for k, v in d.get("channel_mean", {}).items()},
                   tokens=list(d.get("tokens", [])),
                   smoothing={k: [float(x) for x in v] for k, v in d.get("smoothing", {}).items()},
                   smoothed_amax={k: float(v) for k, v in d.get("smoothed_amax", {}).items()},
                   smoothing_alpha=d.get("smoothing_alpha"))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Calibration":
        with open(path) as f:
            return cls.from_dict(json.load(f))

    def __repr__(self) -> str:
        smooth = f", {len(self.smoothing)} smoothed (alpha {self.smoothing_alpha})" if self.smoothing else ""
        return f"<twinfer.quantize.Calibration {self.method}, {len(self.amax)} tensors, {self.samples} samples{smooth}>"


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
        raise InvalidArgumentError("calibration samples must be feed dicts, or tuples in input order, for a model "
                                   "with several inputs (calibration= takes a list of samples: one tuple of "
                                   "arrays goes in a list)")
    return {inputs[0].name: sample}


def calibrate(model, data: Iterable, calibrator: str = "percentile", percentile: float = 99.99, bins: int = 2048,
              num_threads: int = 0, progress: bool = True, max_samples: int | None = None,
              smoothing: float | None = DEFAULT_ALPHA) -> Calibration:
    """Run the float32 model (on the CPU) over ``data`` — feed dicts, tuples in
    input order, or arrays for a one-input model — and choose each
    quantizable activation's range with ``calibrator``: "minmax", "percentile"
    (|x| at ``percentile``) or "entropy" (KL divergence, as TensorRT).

    ``smoothing``: SmoothQuant's alpha for the token sequences (activations
    of rank >= 3 read by MatMul/Gemm layers with constant weights): their
    per-channel ranges are balanced against the weights
    (twinfer.quantize.smoothing) and a second pass over ``data`` calibrates
    the smoothed values; None: no smoothing."""
    from tqdm.auto import tqdm

    from .. import _core
    from .._engine import Engine, open_engine
    from .._source import model_source

    if calibrator not in CALIBRATORS:
        raise InvalidArgumentError(f"calibrator must be one of {CALIBRATORS}, got {calibrator!r}")
    if calibrator == "percentile" and not 0 < float(percentile) <= 100:
        raise InvalidArgumentError(f"percentile must be in (0, 100], got {percentile!r}")
    # One feed dict, or one array for a one-input model, is one sample (a
    # dict was iterated as its keys, an array as its rows).
    if isinstance(data, dict) or hasattr(data, "__array_interface__") or hasattr(data, "__dlpack__"):
        data = [data]
    if smoothing is not None and not 0.0 <= float(smoothing) <= 1.0:
        raise InvalidArgumentError(f"smoothing (alpha) must be in [0, 1] or None, got {smoothing!r}")
    axes = _activation_channel_axes(model)
    names = list(axes)
    if not names:
        raise InvalidArgumentError("no Conv / ConvTranspose / Gemm / MatMul of the model reads an activation where "
                                   "int8 quantizes one (their first input, either of a MatMul's; a Gemm whose A is "
                                   "a constant stays float)")
    source = model_source(model)
    # The activations MatMul/Gemm layers with constant weights read, and
    # those weights' largest |w| per row (from the model as the build sees it).
    weight_amax = {k: v for k, v in _core.smoothing_weight_amax(*source).items() if k in axes}
    engine = Engine(open_engine(source, "cpu", num_threads=num_threads, extra_outputs=names))

    def observer():
        return MinMaxObserver() if calibrator == "minmax" else HistogramObserver(bins)

    def chosen(ob) -> float:
        if calibrator == "minmax":
            return ob.amax
        return ob.percentile(percentile) if calibrator == "percentile" else ob.entropy()

    observers = {n: observer() for n in names}
    means = {n: ChannelMeanObserver(a) for n, a in axes.items() if a is not None}
    channel_amax = {n: ChannelAmaxObserver() for n in weight_amax}
    samples = []  # kept for the smoothing pass: `data` may be an iterator
    total = len(data) if hasattr(data, "__len__") else None
    if max_samples is not None and total is not None:
        total = min(total, max_samples)
    with tqdm(total=total, desc="twinfer: calibrating", unit="batch", disable=not progress, leave=False) as bar:
        for sample in data:
            if max_samples is not None and len(samples) >= max_samples:
                break
            samples.append(sample)
            out = engine.run(_feeds(sample, engine.inputs))
            for n in names:
                x = out[n].numpy()
                observers[n].update(x)
                if n in means:
                    means[n].update(x)
                if n in channel_amax:
                    channel_amax[n].update(x)
            bar.update(1)
    if not samples:
        raise InvalidArgumentError("the calibration data is empty")
    amax = {n: chosen(ob) for n, ob in observers.items()}
    if not any(a > 0 for a in amax.values()):
        raise InvalidArgumentError("every calibrated activation range is 0: the calibration data (all zeros, or "
                                   "empty batches) says nothing of the values the model will see")
    # Ranges of 0 (always 0 here) are kept: an engine built from them leaves
    # their readers in float, and says so (open_engine).
    tokens = [n for n, ob in channel_amax.items()
              if ob.rank >= 3 and ob.amax is not None and len(ob.amax) == len(weight_amax[n])]
    factors = {}
    if smoothing is not None:
        factors = {n: smoothing_factors(channel_amax[n].amax, weight_amax[n], float(smoothing)) for n in tokens}
    smoothed_amax = {}
    if factors:  # second pass: the range of x / s, as the int8 build will quantize it
        smoothed = {n: observer() for n in factors}
        with tqdm(total=len(samples), desc="twinfer: calibrating smoothed", unit="batch", disable=not progress,
                  leave=False) as bar:
            for sample in samples:
                out = engine.run(_feeds(sample, engine.inputs))
                for n, s in factors.items():
                    smoothed[n].update(out[n].numpy() / s)
                bar.update(1)
        smoothed_amax = {n: chosen(ob) for n, ob in smoothed.items()}
    return Calibration(method=calibrator, amax=amax,
                       observed={n: (o.min, o.max) for n, o in observers.items()},
                       samples=len(samples), percentile=percentile if calibrator == "percentile" else None,
                       channel_mean={n: m.mean for n, m in means.items() if m.mean is not None},
                       tokens=tokens, smoothing={n: f.tolist() for n, f in factors.items()},
                       smoothed_amax=smoothed_amax, smoothing_alpha=float(smoothing) if factors else None)
