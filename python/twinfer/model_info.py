"""What is in an ONNX model: inputs, outputs, ops, parameters, a FLOPs
estimate, opsets, and which ops this twinfer build cannot run.

    from twinfer.model_info import describe
    info = describe("model.onnx", shapes={"input": [1, 3, 224, 224]})
    print(info)              # or display it in Jupyter

Reads the file with the ``onnx`` package (weights are not loaded: sizes come
from the tensors' declared dims). The op histogram includes the nodes inside
If/Loop/Scan bodies. The FLOPs figure is an estimate: it counts Conv,
ConvTranspose, Gemm and MatMul (2 x multiply-adds) of the main graph at the
shapes ONNX shape inference gives for the input shapes shown, and nothing else.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import Error, InvalidArgumentError


@dataclass
class ModelInfo:
    path: str
    ir_version: int
    opsets: dict[str, int]
    producer: str
    inputs: list[tuple[str, str, list[Any] | None]]  # (name, dtype, dims); dims None: rank not declared
    outputs: list[tuple[str, str, list[Any] | None]]
    op_histogram: dict[str, int]
    parameters: int
    parameter_bytes: int
    flops: int | None
    flops_shapes: dict[str, list[int]]
    flops_uncounted: int = 0
    unsupported: list[str] = field(default_factory=list)
    load_error: str | None = None
    notes: list[str] = field(default_factory=list)
    source: str = ""  # where the file came from, when not given by the user (e.g. "torchvision:resnet18")

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __str__(self) -> str:
        def shape(s):
            if s is None:
                return "(shape not declared)"
            return "[" + ", ".join("?" if d is None else str(d) for d in s) + "]"

        lines = [f"model: {self.source} -> {self.path}" if self.source else f"model: {self.path}"]
        lines.append(f"  ir_version {self.ir_version}, producer {self.producer or '?'}, opsets: "
                     + ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in sorted(self.opsets.items())))
        lines.append("inputs:")
        lines += [f"  {n}: {t} {shape(s)}" for n, t, s in self.inputs]
        lines.append("outputs:")
        lines += [f"  {n}: {t} {shape(s)}" for n, t, s in self.outputs]
        lines.append(f"parameters: {self.parameters:,} ({_bytes(self.parameter_bytes)})")
        lines.append(self.flops_line())
        total = sum(self.op_histogram.values())
        lines.append(f"ops ({total} nodes, {len(self.op_histogram)} types):")
        for op, n in sorted(self.op_histogram.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {op:<28}{n:>6}")
        lines.append(self.support_line())
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def flops_line(self) -> str:
        if self.flops is None:
            return "FLOPs: no estimate (shape inference failed)"
        at = ", ".join(f"{k}={'x'.join(map(str, v)) if v else 'scalar'}" for k, v in self.flops_shapes.items())
        extra = f"; {self.flops_uncounted} node(s) of unknown shape not counted" if self.flops_uncounted else ""
        return f"FLOPs (estimate: Conv/ConvTranspose/Gemm/MatMul at {at}): {_flops(self.flops)}{extra}"

    def support_line(self) -> str:
        if self.load_error:
            return f"twinfer: cannot load: {self.load_error}"
        if self.unsupported:
            return "twinfer: unsupported ops: " + ", ".join(self.unsupported)
        return "twinfer: every op is supported (the model loads)"

    def _repr_html_(self) -> str:
        from .display import key_values, table

        parts = [
            key_values([
                ("model", f"{self.source} -> {self.path}" if self.source else self.path),
                ("opsets", ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in sorted(self.opsets.items()))),
                ("parameters", f"{self.parameters:,} ({_bytes(self.parameter_bytes)})"),
                ("FLOPs", self.flops_line().split(": ", 1)[-1] if self.flops is not None else "no estimate"),
                ("twinfer", self.support_line().split(": ", 1)[-1]),
            ], "twinfer inspect"),
            table(["input", "dtype", "shape"], [(n, t, "?" if s is None else list(s)) for n, t, s in self.inputs]),
            table(["output", "dtype", "shape"], [(n, t, "?" if s is None else list(s)) for n, t, s in self.outputs]),
            table(["op", "count"], sorted(self.op_histogram.items(), key=lambda kv: (-kv[1], kv[0]))),
        ]
        return "<div>" + "".join(parts) + "</div>"


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _flops(n: int) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}FLOPs ({n:,})"
    return f"{n} FLOPs"


def _dims(type_proto) -> list[Any] | None:
    """Declared dims (ints, symbolic names, None for unnamed unknown ones); None when the rank is unknown."""
    t = type_proto.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]


def _dtype_name(elem_type: int) -> str:
    import onnx

    try:
        return str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)))
    except Exception:
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def _tensor_nbytes(t) -> int:
    import onnx

    n = int(np.prod(t.dims)) if len(t.dims) else 1
    try:
        size = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    except Exception:
        size = 1
    return n * size


def _count_flops(model, shapes: dict[str, list[int]]) -> tuple[int | None, int]:
    """2 x MACs of Conv/ConvTranspose/Gemm/MatMul at the given input shapes."""
    import onnx
    from onnx import shape_inference

    m = onnx.ModelProto()
    m.CopyFrom(model)
    for inp in m.graph.input:
        if inp.name in shapes:
            dims = inp.type.tensor_type.shape.dim
            for d, v in zip(dims, shapes[inp.name]):
                d.Clear()
                d.dim_value = int(v)
    try:
        m = shape_inference.infer_shapes(m, data_prop=True)
    except Exception:
        return None, 0
    known: dict[str, list[Any] | None] = {}
    for vi in list(m.graph.input) + list(m.graph.value_info) + list(m.graph.output):
        known[vi.name] = _dims(vi.type)
    for t in m.graph.initializer:
        known[t.name] = list(t.dims)

    def shape(name):
        s = known.get(name)
        return s if s is not None and all(isinstance(d, int) and d > 0 for d in s) else None

    flops, uncounted = 0, 0
    for n in m.graph.node:
        if n.domain not in ("", "ai.onnx") or n.op_type not in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
            continue
        a = shape(n.input[0])
        b = shape(n.input[1]) if len(n.input) > 1 else None
        y = shape(n.output[0])
        attrs = {at.name: onnx.helper.get_attribute_value(at) for at in n.attribute}
        if a is None or b is None or y is None:
            uncounted += 1
            continue
        if n.op_type == "Conv":  # W: [Cout, Cin/g, k...], Y: [N, Cout, spatial...]
            flops += 2 * int(np.prod(y)) * int(np.prod(b[1:]))
        elif n.op_type == "ConvTranspose":  # W: [Cin, Cout/g, k...], X: [N, Cin, spatial...]
            flops += 2 * int(np.prod(a)) * int(np.prod(b[1:]))
        elif n.op_type == "Gemm":
            k = a[0] if attrs.get("transA", 0) else a[-1]
            flops += 2 * int(np.prod(y)) * k
        else:  # MatMul: [..., M, K] x [..., K, N]
            flops += 2 * int(np.prod(y)) * a[-1]
    return flops, uncounted


def _walk(graph, depth: int = 0):
    """(node, depth) for every node of ``graph`` and of its nodes' subgraphs."""
    from onnx import AttributeProto

    for n in graph.node:
        yield n, depth
        for at in n.attribute:
            if at.type == AttributeProto.GRAPH:
                yield from _walk(at.g, depth + 1)
            elif at.type == AttributeProto.GRAPHS:
                for sub in at.graphs:
                    yield from _walk(sub, depth + 1)


def _graphs(graph):
    """``graph`` and every If/Loop/Scan body inside it."""
    from onnx import AttributeProto

    yield graph
    for n in graph.node:
        for at in n.attribute:
            if at.type == AttributeProto.GRAPH:
                yield from _graphs(at.g)
            elif at.type == AttributeProto.GRAPHS:
                for sub in at.graphs:
                    yield from _graphs(sub)


def _twinfer_support(path: str) -> tuple[list[str], str | None]:
    """Load the model in twinfer: the ops it lacks, or the load error."""
    import twinfer

    try:
        twinfer.load(path, device="cpu")
    except twinfer.UnsupportedOpError as e:
        text = str(e)
        if text.startswith("unsupported ops: "):  # "unsupported ops: A (node n1); B (nodes n2, n3)"
            return text[len("unsupported ops: "):].split("; "), None
        return [text], None
    except Error as e:
        return [], f"{type(e).__name__}: {e}"
    return [], None


def describe(path: str | os.PathLike, shapes: dict[str, list[int]] | None = None, batch: int = 1,
             check_support: bool = True) -> ModelInfo:
    """Summarise the ONNX file at ``path``. ``shapes`` fixes input shapes for the
    FLOPs estimate (symbolic dims default to ``batch`` for dim 0 and 1 elsewhere)."""
    try:
        import onnx
    except ImportError as e:  # pragma: no cover - onnx is in the [onnx] extra
        raise InvalidArgumentError("twinfer inspect needs the onnx package: pip install 'twinfer[onnx]'") from e
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InvalidArgumentError(f"model file not found: {path}")
    model = onnx.load(path, load_external_data=False)
    g = model.graph
    init_names = {t.name for t in g.initializer}
    inputs = [(i.name, _dtype_name(i.type.tensor_type.elem_type), _dims(i.type)) for i in g.input if i.name not in init_names]
    outputs = [(o.name, _dtype_name(o.type.tensor_type.elem_type), _dims(o.type)) for o in g.output]
    hist = Counter()
    nested = 0
    for node, depth in _walk(g):  # If/Loop/Scan bodies included
        hist[(node.domain + "::" if node.domain not in ("", "ai.onnx") else "") + node.op_type] += 1
        nested += depth > 0
    # Weights of If/Loop/Scan bodies count too (a Loop-wrapped decoder keeps its own).
    inits = [t for sub in _graphs(g) for t in sub.initializer]
    params = sum(int(np.prod(t.dims)) if len(t.dims) else 1 for t in inits)
    nbytes = sum(_tensor_nbytes(t) for t in inits)

    from .benchmark import concrete_shapes
    from .engine import TensorSpec

    specs = [TensorSpec(n, t, tuple(s or ()), s is not None) for n, t, s in inputs]
    at = concrete_shapes(specs, shapes, batch)
    flops, uncounted = _count_flops(model, at)
    info = ModelInfo(
        path=path, ir_version=model.ir_version, opsets={o.domain: o.version for o in model.opset_import},
        producer=" ".join(x for x in (model.producer_name, model.producer_version) if x),
        inputs=inputs, outputs=outputs, op_histogram=dict(hist), parameters=params, parameter_bytes=nbytes,
        flops=flops, flops_shapes=at, flops_uncounted=uncounted,
    )
    if any(n.op_type == "Constant" for n, _ in _walk(g)):
        info.notes.append("parameters count initializers only (Constant nodes are not counted)")
    if nested:
        info.notes.append(f"the op counts include {nested} node(s) inside If/Loop/Scan bodies; "
                          "the FLOPs estimate counts the main graph only")
    if check_support:
        info.unsupported, info.load_error = _twinfer_support(path)
    return info
