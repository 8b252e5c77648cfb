"""What INT8 costs, layer by layer, and the float fallback that meets a target.

>>> report = twinfer.quantize.analyze("model.onnx", samples, accuracy_target=0.999)
>>> report                       # a table (HTML in Jupyter): SQNR, cosine, saturation per layer
>>> report.keep_float            # the layers kept in float to reach the target
>>> engine = twinfer.load("model.onnx", precision="int8", calibration=report.calibration,
...                       keep_float=report.keep_float)

Per layer (each quantized Conv / ConvTranspose / Gemm / MatMul):
* ``sqnr_db`` and ``cosine`` of its output in the all-int8 engine against the
  float32 engine on the same inputs (errors accumulated from earlier layers);
* ``alone_cosine``: the model's output cosine when only this layer is int8
  (its own cost, what the fallback ranks by; NaN with rank="sqnr");
* ``saturation``: the share of its activation inputs beyond the calibrated
  range (clipped by int8; x / s against the smoothed range where the
  activation is smoothed; none where it is quantized per token).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from ..errors import InvalidArgumentError
from .calibration import QUANTIZABLE, Calibration, _feeds, calibrate  # noqa: F401
from .smoothing import DEFAULT_ALPHA


@dataclass
class LayerReport:
    node: str
    op: str
    output: str
    sqnr_db: float
    cosine: float
    alone_cosine: float
    saturation: float


@dataclass
class QuantReport:
    calibration: Calibration
    layers: list[LayerReport]
    output_cosine: float                 # all layers int8 (except keep_float), model outputs vs float32
    keep_float: list[str] = field(default_factory=list)
    accuracy_target: float | None = None
    steps: list[tuple[int, float]] = field(default_factory=list)  # (layers kept in float, output cosine) tried

    def worst(self, n: int = 10) -> list[LayerReport]:
        return sorted(self.layers, key=lambda r: (r.alone_cosine, r.sqnr_db))[:n]

    def _rows(self):
        keep = set(self.keep_float)
        return [(r.node, r.op, f"{r.sqnr_db:.1f}", f"{r.cosine:.5f}", f"{r.alone_cosine:.6f}",
                 f"{100 * r.saturation:.3f}%", "float" if r.node in keep else "int8") for r in self.layers]

    HEADERS = ("layer", "op", "SQNR dB", "cosine", "alone: output cosine", "saturated", "runs in")

    def __str__(self) -> str:
        lines = [f"twinfer int8 report ({self.calibration.method} calibration, {self.calibration.samples} samples): "
                 f"output cosine {self.output_cosine:.6f}"
                 + (f", target {self.accuracy_target} -> {len(self.keep_float)} layer(s) kept in float"
                    if self.accuracy_target is not None else "")]
        widths = [max(len(h), *(len(str(r[i])) for r in self._rows())) for i, h in enumerate(self.HEADERS)]
        lines.append("  " + "  ".join(h.ljust(w) for h, w in zip(self.HEADERS, widths)))
        for row in self._rows():
            lines.append("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        from ..display import key_values, table

        head = key_values([("calibration", f"{self.calibration.method}, {self.calibration.samples} samples"),
                           ("output cosine vs float32", f"{self.output_cosine:.6f}"),
                           ("accuracy target", self.accuracy_target),
                           ("kept in float", ", ".join(self.keep_float) or "none")], "twinfer int8 report")
        return head + table(list(self.HEADERS), self._rows())

    def plot(self, ax=None):
        """SQNR per layer (bars), layers kept in float marked."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(max(6, 0.25 * len(self.layers)), 3))
        keep = set(self.keep_float)
        xs = np.arange(len(self.layers))
        ax.bar(xs, [r.sqnr_db for r in self.layers],
               color=["tab:orange" if r.node in keep else "tab:blue" for r in self.layers])
        ax.set_xlabel("layer (graph order; orange: kept in float)")
        ax.set_ylabel("SQNR (dB)")
        ax.set_title(f"int8 per-layer SQNR, output cosine {self.output_cosine:.5f}")
        return ax


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return float(a @ b / (na * nb))


def _sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    noise = float(np.sum((np.asarray(ref, np.float64) - got) ** 2))
    signal = float(np.sum(np.asarray(ref, np.float64) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(max(signal, 1e-30) / noise)


def _quantized_layers(model, calibration: Calibration) -> list[tuple[str, str, str, list[str]]]:
    """(node, op, output, activation inputs) of the nodes an int8 engine quantizes (mirrors insert_qdq)."""
    from .. import _core
    from .._source import model_source

    source, is_path, base_dir = model_source(model)
    info = _core.read_model_info(source, is_path, base_dir)
    layers = []
    for (name, op, domain), (ins, outs) in zip(info["nodes"], info["node_io"]):
        if domain not in ("", "ai.onnx") or op not in QUANTIZABLE or not outs or not outs[0]:
            continue
        data = [ins[k] for k in (0, 1) if k < len(ins) and ins[k][0]]  # activation and weight
        acts = [n for n, const in data if not const]
        if not any(const for _, const in data) or any(a not in calibration.amax for a in acts):
            continue
        # A node without a name (valid ONNX) is named by its first output, as
        # keep_float takes it: "" named every unnamed layer at once.
        layers.append((name or outs[0], op, outs[0], acts))
    return layers


def analyze(model, calibration, data: Iterable | None = None, calibrator: str = "percentile",
            percentile: float = 99.99, accuracy_target: float | None = None, rank: str = "alone",
            max_samples: int = 8, num_threads: int = 0, progress: bool = True, smoothing: float | None = DEFAULT_ALPHA,
            per_token="auto") -> QuantReport:
    """Per-layer int8 cost on ``data`` (default: the calibration samples);
    ``calibration`` is sample inputs or a Calibration. With
    ``accuracy_target`` (output cosine vs float32), the costliest layers are
    kept in float until the target is met: ranked by ``rank`` = "alone" (the
    output cosine with only that layer in int8: one engine build per layer)
    or "sqnr" (the layer's SQNR in the all-int8 run: no extra builds); the
    fewest layers that meet the target are found by bisection. ``smoothing``
    (the alpha calibration uses, or None) and ``per_token`` are
    twinfer.load's int8 options of the same names."""
    if rank not in ("alone", "sqnr"):
        raise InvalidArgumentError("rank must be 'alone' or 'sqnr'")
    if accuracy_target is not None and not 0 < float(accuracy_target) <= 1:
        raise InvalidArgumentError(f"accuracy_target is an output cosine: in (0, 1], got {accuracy_target!r}")
    from tqdm.auto import tqdm

    from .._engine import Engine, open_engine
    from .._source import model_source

    if isinstance(calibration, Calibration):
        cal = calibration
        samples = list(data) if data is not None else None
        if samples is None:
            raise InvalidArgumentError("with a ready Calibration, pass data= to evaluate on")
    else:
        calibration = list(calibration)
        cal = calibrate(model, calibration, calibrator=calibrator, percentile=percentile, num_threads=num_threads,
                        progress=progress, smoothing=smoothing)
        samples = list(data) if data is not None else calibration
    samples = samples[:max_samples]
    if not samples:
        raise InvalidArgumentError("no samples to evaluate on")
    layers = _quantized_layers(model, cal)
    if not layers:
        raise InvalidArgumentError("nothing in this model is quantized to int8")
    names = [l[0] for l in layers]
    per_token_acts = set(cal.tokens) if per_token == "auto" else set(cal.amax) if per_token else set()
    taps = [l[2] for l in layers]
    acts = sorted({a for l in layers for a in l[3]})

    source = model_source(model)
    ref_engine = Engine(open_engine(source, "cpu", num_threads=num_threads, extra_outputs=taps + acts))
    model_outputs = [s.name for s in ref_engine.outputs][: len(ref_engine.outputs) - len(taps) - len(acts)]
    feeds = [_feeds(s, ref_engine.inputs) for s in samples]
    ref = [{k: v.numpy().copy() for k, v in ref_engine.run(f).items()} for f in feeds]

    def engine(keep):
        return Engine(open_engine(source, "cpu", "int8", calibration=cal, keep_float=keep, num_threads=num_threads,
                                  extra_outputs=taps, smoothing=smoothing is not None, per_token=per_token))

    def output_cosine(eng) -> float:
        got, want = [], []
        for f, r in zip(feeds, ref):
            out = eng.run(f)
            got += [out[n].numpy().ravel() for n in model_outputs]
            want += [r[n].ravel() for n in model_outputs]
        return _cosine(np.concatenate(want), np.concatenate(got))

    full = engine([])
    outs = [{k: v.numpy() for k, v in full.run(f).items()} for f in feeds]
    all_int8 = _cosine(np.concatenate([r[n].ravel() for r in ref for n in model_outputs]),
                       np.concatenate([o[n].ravel() for o in outs for n in model_outputs]))
    reports = []
    for node, op, out, ins in tqdm(layers, desc="twinfer: per-layer int8 cost", disable=not progress, leave=False):
        r_cat = np.concatenate([r[out].ravel() for r in ref])
        q_cat = np.concatenate([o[out].ravel() for o in outs])
        sat_n = sat_d = 0
        for a in ins:
            # Per token, a row's own largest |x| is its range: nothing clips.
            dynamic = a in per_token_acts and op in ("MatMul", "Gemm")
            smoothed = smoothing is not None and a in cal.smoothing and a in cal.smoothed_amax
            amax = cal.smoothed_amax[a] if smoothed else cal.amax[a]
            s = np.asarray(cal.smoothing[a], np.float32) if smoothed else 1.0
            for r in ref:
                if not dynamic:
                    sat_n += int(np.count_nonzero(np.abs(r[a] / s) > amax))
                sat_d += r[a].size
        alone = output_cosine(engine([n for n in names if n != node])) if rank == "alone" else float("nan")
        reports.append(LayerReport(node, op, out, _sqnr(r_cat, q_cat), _cosine(r_cat, q_cat), alone,
                                   sat_n / max(1, sat_d)))

    keep: list[str] = []
    steps = [(0, all_int8)]
    final = all_int8
    if accuracy_target is not None and all_int8 < accuracy_target:
        key = (lambda r: r.alone_cosine) if rank == "alone" else (lambda r: r.sqnr_db)
        order = [r.node for r in sorted(reports, key=key)]
        # Every layer in float, measured (not assumed 1: what the engine
        # still quantizes around them, or its float summation, may remain).
        tried = {0: all_int8, len(order): output_cosine(engine(order))}
        steps.append((len(order), tried[len(order)]))
        if tried[len(order)] < accuracy_target:
            warnings.warn(f"accuracy_target {accuracy_target} is not met even with every layer in float (output "
                          f"cosine {tried[len(order)]:.6f}): all {len(order)} kept", RuntimeWarning, stacklevel=2)
        lo, hi = 0, len(order)  # target missed with lo layers in float, met with hi (or all, if none meets it)
        if tried[hi] < accuracy_target:
            lo = hi - 1  # nothing to search
        while hi - lo > 1:
            mid = (lo + hi) // 2
            tried[mid] = output_cosine(engine(order[:mid]))
            steps.append((mid, tried[mid]))
            if tried[mid] >= accuracy_target:
                hi = mid
            else:
                lo = mid
        keep, final = order[:hi], tried[hi]
    return QuantReport(cal, reports, final, keep, accuracy_target, steps)
