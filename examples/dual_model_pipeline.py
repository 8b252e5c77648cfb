"""Two models at once: side by side (twinfer.Parallel) and as a pipeline
(twinfer.Pipeline), with a profile of how much they overlapped.

    python examples/dual_model_pipeline.py

A "backbone" (ResNet-18) turns images into feature maps; a host function
pools them; a "head" (a small MLP) classifies. The pipeline runs image k+1
through the backbone while the head works on image k. Every result is checked
against running the same engines one after another.
On a GPU each engine gets its own CUDA stream; on the CPU its own share of the cores.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch
import torchvision

import twinfer


def export(module: torch.nn.Module, example: torch.Tensor, path: Path, out: str) -> Path:
    torch.onnx.export(module.eval(), (example,), str(path), dynamo=False, opset_version=17,
                      input_names=["input"], output_names=[out], dynamic_axes={"input": {0: "batch"}})
    return path


def main() -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        resnet = torchvision.models.resnet18(weights=None)
        backbone_module = torch.nn.Sequential(*list(resnet.children())[:-2])  # -> (N, 512, 2, 2) at 64x64
        head_module = torch.nn.Sequential(torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
        backbone = twinfer.load(export(backbone_module, torch.randn(1, 3, 64, 64), Path(tmp) / "backbone.onnx",
                                       "features"), device="cpu")
        head = twinfer.load(export(head_module, torch.randn(1, 512), Path(tmp) / "head.onnx", "logits"), device="cpu")

        def pool(outputs):  # a host step between the engines: global average pooling
            return {"input": outputs["features"].numpy().mean(axis=(2, 3))}

        images = [rng.standard_normal((2, 3, 64, 64)).astype(np.float32) for _ in range(12)]

        # The reference: the same engines one after another, nothing overlapping.
        expected = [head.run(pool(backbone.run({"input": im})))["logits"].numpy() for im in images]

        with twinfer.Pipeline([backbone, pool, head], names=["backbone", "pool", "head"]) as pipe:
            got = [out["logits"].numpy() for out in pipe.map({"input": im} for im in images)]
            worst = max(float(np.abs(g - e).max()) for g, e in zip(got, expected))
            assert worst < 1e-4, worst
            print(f"pipeline: matches the sequential run on {len(images)} items (max abs diff {worst:.1e})")
            print(pipe.profile([{"input": im} for im in images]))

        # Side by side: two independent models, each in its own execution context.
        with twinfer.Parallel([backbone, head], names=["backbone", "head"]) as par:
            feeds = [{"input": images[0]}, {"input": rng.standard_normal((8, 512)).astype(np.float32)}]
            outs = par.run(feeds)
            assert np.allclose(outs[0]["features"].numpy(), backbone.run(feeds[0])["features"].numpy(), atol=1e-5)
            print("parallel: matches the sequential run")
            print(par.profile(feeds, iterations=10))


if __name__ == "__main__":
    main()
