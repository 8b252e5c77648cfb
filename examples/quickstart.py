"""Quickstart: export a model to ONNX, load it in twinfer, run it, check it.

    python examples/quickstart.py

Uses torchvision's ResNet-18 with random weights at 64x64 pixels so it runs in
seconds on any CPU; swap in your own ONNX file and input for real work.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
import torchvision

import twinfer


def export(folder: Path) -> Path:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    path = folder / "resnet18.onnx"
    torch.onnx.export(model, (torch.randn(1, 3, 64, 64),), str(path), dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    return path


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = export(Path(tmp))

        engine = twinfer.load(path, device="cpu")  # device="auto" picks a GPU when there is one
        print(engine)  # inputs/outputs with their symbolic dims

        images = np.random.default_rng().standard_normal((4, 3, 64, 64)).astype(np.float32)
        t0 = time.perf_counter()
        logits = engine.run({"input": images})["logits"].numpy()  # a zero-copy NumPy view
        print(f"twinfer ran batch 4 in {1e3 * (time.perf_counter() - t0):.1f} ms (first run: includes planning)")
        print("top-5 classes of image 0:", np.argsort(logits[0])[::-1][:5].tolist())

        # An independent check: onnxruntime on the same file and data.
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        expected = sess.run(None, {"input": images})[0]
        diff = float(np.abs(logits - expected).max())
        print(f"quickstart: twinfer matches onnxruntime (max abs diff {diff:.2e})")
        assert diff < 1e-3

        # Save the built engine; loading it later (any process) skips the graph passes.
        engine.save(Path(tmp) / "resnet18.twinfer")
        again = twinfer.load(Path(tmp) / "resnet18.twinfer", device="cpu")
        same = np.array_equal(again.run({"input": images})["logits"].numpy(), logits)
        print(f"saved engine reloaded: same logits: {same}")
        assert same


if __name__ == "__main__":
    main()
