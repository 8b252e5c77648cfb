"""The 2-layer GPT-2 merged by Hugging Face Optimum (tests/data/
make_merged_decoder.py: If(use_cache_branch) picks the first step's network
or the one with past), and a greedy generation loop that runs it on a
twinfer engine and on onnxruntime side by side, comparing every step."""

from __future__ import annotations

from pathlib import Path

import numpy as np

MERGED_DECODER = Path(__file__).parent / "data" / "gpt2_tiny_merged_decoder.onnx"


def greedy_steps_against_onnxruntime(engine, rng, steps: int, batch: int = 2, prompt: int = 5, after_step=None):
    """`steps` greedy steps from a random prompt: each step's outputs on
    `engine` equal onnxruntime's; after_step(step, feeds) checks more. The
    past grows by one token a step, so every step is a new input shape."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(MERGED_DECODER), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ids = rng.integers(0, 97, (batch, prompt)).astype(np.int64)
    past = {f"past_key_values.{i}.{kv}": np.zeros((batch, 2, 0, 16), np.float32) for i in range(2)
            for kv in ("key", "value")}
    total = 0
    for step in range(steps):
        seq = ids.shape[1]
        feeds = {"input_ids": ids, "attention_mask": np.ones((batch, total + seq), np.int64),
                 "position_ids": np.arange(total, total + seq, dtype=np.int64)[None].repeat(batch, 0),
                 "use_cache_branch": np.array([step > 0]), **past}
        want = dict(zip(names, sess.run(None, feeds)))
        got = {k: v.numpy() for k, v in engine.run(feeds).items()}
        for k, w in want.items():
            np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-5, err_msg=f"step {step} {k}")
        if after_step:
            after_step(step, feeds)
        total += seq
        past = {f"past_key_values.{i}.{kv}": want[f"present.{i}.{kv}"] for i in range(2) for kv in ("key", "value")}
        ids = want["logits"][:, -1:].argmax(-1).astype(np.int64)
