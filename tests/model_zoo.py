"""The model families twinfer must run, built from torchvision / transformers
with seeded random weights, exported with both PyTorch ONNX exporters."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch

FAMILIES = ["resnet50", "mobilenet_v2", "efficientnet_b0", "vit_b_16", "bert"]
EXPORTERS = ["torchscript", "dynamo"]


def build(family: str):
    """(module, example inputs tuple, input names, dynamic dims per input)."""
    torch.manual_seed(1234)
    if family == "bert":
        from transformers import BertConfig, BertModel

        cfg = BertConfig(
            vocab_size=1000, hidden_size=96, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=192, max_position_embeddings=256,
        )
        model = BertModel(cfg, add_pooling_layer=False).eval()

        class Encoder(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)[0]

        ids = torch.randint(0, 1000, (2, 19))
        mask = torch.ones(2, 19, dtype=torch.int64)
        mask[1, 11:] = 0
        names = ["input_ids", "attention_mask", "token_type_ids"]
        return Encoder(model), (ids, mask, torch.zeros_like(ids)), names, {n: {0: "batch", 1: "sequence"} for n in names}
    import torchvision

    if family == "vit_b_16":
        model = torchvision.models.vit_b_16(image_size=64)
    else:
        model = getattr(torchvision.models, family)()
    # Non-trivial BatchNorm statistics, so Conv+BN folding is really exercised.
    with torch.no_grad():
        if family == "vit_b_16":
            # torchvision starts ViT's head at zero: the output would be zeros
            # whatever the encoder computed.
            model.heads.head.weight.normal_(0, 0.05)
            model.heads.head.bias.uniform_(-0.1, 0.1)
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return model.eval(), (torch.randn(2, 3, 64, 64),), ["input"], {"input": {0: "batch"}}


def export(family: str, exporter: str, folder: Path) -> Path:
    model, args, names, dyn = build(family)
    path = folder / f"{family}-{exporter}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            # Positional, because torch.export matches dict keys to forward()'s
            # argument names, which differ from the ONNX input names.
            dims = {}
            dynamic_shapes = tuple(
                {axis: dims.setdefault(sym, torch.export.Dim(sym, min=1, max=1024)) for axis, sym in dyn[n].items()}
                for n in names
            )
            torch.onnx.export(model, args, str(path), dynamo=True, input_names=names, output_names=["output"],
                              dynamic_shapes=dynamic_shapes, verbose=False)
        else:
            torch.onnx.export(model, args, str(path), dynamo=False, input_names=names, output_names=["output"],
                              dynamic_axes=dyn, opset_version=17)
    return path


def random_feeds(family: str, rng: np.random.Generator, batch: int, seq: int = 23) -> dict[str, np.ndarray]:
    if family == "bert":
        ids = rng.integers(0, 1000, size=(batch, seq), dtype=np.int64)
        mask = np.ones((batch, seq), dtype=np.int64)
        mask[0, seq // 2 :] = 0
        types = (rng.random((batch, seq)) > 0.5).astype(np.int64)
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    return {"input": rng.standard_normal((batch, 3, 64, 64)).astype(np.float32)}
