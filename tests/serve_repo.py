"""Small ONNX models and Triton-style model repositories for the serving tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from onnx_helpers import make_model

MLP_CONFIG = """
name: "{name}"
max_batch_size: 8
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 3 ] }} ]
"""


def mlp_model(rng) -> onnx.ModelProto:
    """x [N, 4] -> relu(x @ w1 + b) @ w2 -> y [N, 3]."""
    w1 = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    w2 = rng.standard_normal((6, 3)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    return make_model(nodes, [("x", np.float32, ["N", 4])], [("y", np.float32, ["N", 3])],
                      [("w1", w1), ("b", b), ("w2", w2)])


def pair_model() -> onnx.ModelProto:
    """a, b int32 [2, 3] -> sum = a + b, prod = a * b (no batch dim)."""
    nodes = [helper.make_node("Add", ["a", "b"], ["sum"]), helper.make_node("Mul", ["a", "b"], ["prod"])]
    return make_model(nodes, [("a", np.int32, [2, 3]), ("b", np.int32, [2, 3])],
                      [("sum", np.int32, [2, 3]), ("prod", np.int32, [2, 3])])


def add_model(repo: Path, name: str, config: str | None, versions: dict[int, onnx.ModelProto | bytes],
              filename: str = "model.onnx") -> Path:
    """repo/name/config.pbtxt (None: no file) and repo/name/<v>/<filename> for each version."""
    folder = repo / name
    folder.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (folder / "config.pbtxt").write_text(config)
    for version, model in versions.items():
        (folder / str(version)).mkdir(exist_ok=True)
        data = model if isinstance(model, bytes) else model.SerializeToString()
        (folder / str(version) / filename).write_bytes(data)
    return folder
