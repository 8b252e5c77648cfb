"""Greedy decoding of a Hugging Face decoder exported with its KV cache
(past_key_values.* in, present.* out: the past grows by one token a step, so
every step is a new input shape), twinfer against onnxruntime (CPU EP).
The models are small random-weight configurations built with transformers
(no download): "llama" (6 layers, hidden 512, 8 heads, 4 KV heads, vocab 8000,
about 30M parameters) and "gpt2" (6 layers, hidden 768, 12 heads, vocab 8000,
about 50M), exported by torch.onnx (TorchScript exporter, opset 17) into
--cache. Per step: "new step" is the run at that step's new shape, "again"
the same inputs run a second time (twinfer's plan cached). twinfer rows: plans
built on demand (plan_ahead=False), the default (plans built ahead), and on
demand with TWINFER_ANY_SIZE_KERNELS=0 (a kernel per size for the attention
products, as before stop 35). Not a test: no assertion, a table and a JSON line.

    python benchmarks/decode_hf.py --model llama              # 60 steps, one thread
    python benchmarks/decode_hf.py --model gpt2 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

LAYERS = 6


def export(kind: str, path: Path) -> None:
    import torch
    import transformers
    from transformers import DynamicCache

    torch.manual_seed(0)
    if kind == "llama":
        cfg = transformers.LlamaConfig(vocab_size=8000, hidden_size=512, intermediate_size=1408,
                                       num_hidden_layers=LAYERS, num_attention_heads=8, num_key_value_heads=4,
                                       max_position_embeddings=1024)
        cfg._attn_implementation = "eager"
        model, kv_heads, head = transformers.LlamaForCausalLM(cfg), 4, 64
    else:
        cfg = transformers.GPT2Config(vocab_size=8000, n_embd=768, n_layer=LAYERS, n_head=12, n_positions=1024)
        cfg._attn_implementation = "eager"
        model, kv_heads, head = transformers.GPT2LMHeadModel(cfg), 12, 64
    model.eval()

    class WithCache(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, position_ids, *past):
            cache = DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(LAYERS)])
            o = self.m(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                       past_key_values=cache, use_cache=True)
            return (o.logits, *[t for layer in o.past_key_values.layers for t in (layer.keys, layer.values)])

    names_in = ["input_ids", "attention_mask", "position_ids"] + [
        f"past_key_values.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")]
    names_out = ["logits"] + [f"present.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")]
    dyn = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "total"},
           "position_ids": {0: "batch", 1: "sequence"}, "logits": {0: "batch", 1: "sequence"}}
    dyn.update({n: {0: "batch", 2: "past"} for n in names_in[3:]})
    dyn.update({n: {0: "batch", 2: "total"} for n in names_out[1:]})
    b, s, p = 2, 3, 4
    args = (torch.randint(0, 8000, (b, s)), torch.ones(b, p + s, dtype=torch.int64),
            torch.arange(p, p + s).expand(b, s).contiguous(),
            *[torch.randn(b, kv_heads, p, head) for _ in range(2 * LAYERS)])
    with torch.no_grad():
        torch.onnx.export(WithCache(model), args, str(path), input_names=names_in, output_names=names_out,
                          dynamic_axes=dyn, opset_version=17, dynamo=False)


def decode(run, steps: int, kv_shape) -> tuple[list[float], list[float]]:
    """Per-step seconds of a first call and of the same call again."""
    feeds = {"input_ids": np.ones((1, 1), np.int64), "attention_mask": np.ones((1, 1), np.int64),
             "position_ids": np.zeros((1, 1), np.int64)}
    feeds.update({f"past_key_values.{i}.{kv}": np.zeros(kv_shape, np.float32)
                  for i in range(LAYERS) for kv in ("key", "value")})
    first, again = [], []
    for step in range(steps):
        times = []
        for _ in range(2):  # the step, then the same inputs again
            t = time.perf_counter()
            out = run(feeds)
            times.append(time.perf_counter() - t)
        first.append(times[0])
        again.append(times[1])
        total = step + 2
        feeds = {"input_ids": out["logits"][:, -1:].argmax(-1).astype(np.int64),
                 "attention_mask": np.ones((1, total), np.int64),
                 "position_ids": np.full((1, 1), total - 1, np.int64)}
        feeds.update({f"past_key_values.{i}.{kv}": out[f"present.{i}.{kv}"]
                      for i in range(LAYERS) for kv in ("key", "value")})
    return first, again


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["llama", "gpt2"], default="llama")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "twinfer-decode-hf")
    args = ap.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    path = args.cache / f"{args.model}_{LAYERS}l.onnx"
    if not path.exists():
        export(args.model, path)
    kv_shape = (1, 4, 0, 64) if args.model == "llama" else (1, 12, 0, 64)

    import onnxruntime as ort

    import twinfer

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ms = lambda xs: statistics.median(xs[1:]) * 1e3  # noqa: E731  (the first step apart)
    rows = {}
    o_first, o_again = decode(lambda f: dict(zip(names, sess.run(None, f))), args.steps, kv_shape)
    rows["onnxruntime"] = (ms(o_first), ms(o_again))
    for name, ahead, any_size in (("twinfer on demand", False, "1"), ("twinfer (default)", True, "1"),
                                  ("on demand, no any-size", False, "0")):
        os.environ["TWINFER_ANY_SIZE_KERNELS"] = any_size
        e = twinfer.load(str(path), device="cpu", num_threads=args.threads, plan_ahead=ahead)
        first, again = decode(lambda f: {k: v.numpy() for k, v in e.run(f).items()}, args.steps, kv_shape)
        rows[name] = (ms(first), ms(again))
    os.environ.pop("TWINFER_ANY_SIZE_KERNELS")
    print(f"{args.model}: {args.steps} greedy steps, batch 1, {args.threads} thread(s); "
          f"ms, median over steps 1..{args.steps - 1}")
    print(f"{'runtime':24s} {'new step':>9s} {'again':>8s}")
    for k, (f, a) in rows.items():
        print(f"{k:24s} {f:9.3f} {a:8.3f}")
    print(json.dumps({"model": args.model, "steps": args.steps, "threads": args.threads, "ms": rows}))


if __name__ == "__main__":
    main()
