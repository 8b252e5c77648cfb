"""Why int8 is slow on the GPU: the GEMMs of int8 BERT and ResNet-50, alone,
in every form twinfer and PyTorch have, on one machine in one run.

On an H200 (docs/gpu-runs/2026-11-30-b56c98f.md) int8 ResNet-50 b256 ran as
slowly as fp32, and a 1x1 int8 convolution (a 802816 x 64 x 256 GEMM) took
2.8 ms, some 9 TOPS, where reading and writing its operands takes ~0.1 ms.
Whether cuBLASLt's int8 kernels are slow at these shapes, or how twinfer
calls them, this table says: per shape (M rows, N output channels, K),

  torch fp16 mm            a [M, K] @ w [N, K].T, cuBLAS
  torch._int_mm            int8 x int8 -> int32, cuBLASLt's TN int8 GEMM
  torch._scaled_mm fp8     E4M3 x E4M3 -> fp16, per-tensor scales
  twinfer int8 -> int8     a QDQ MatMul with quantized output and ReLU
                           (cuBLASLt's int8-output GEMM: scale, bias, ReLU in
                           its epilogue, where it takes it)
  twinfer int8 -> float    the same with float output (int32 GEMM + our epilogue)

with the median ms of the op (CUDA events; twinfer: a whole engine run,
quantization of x included), TOPS, and for twinfer the kernels CUPTI saw
(the GEMM kernel's name says which cuBLASLt kernel ran: sm90_xmma_*
igmma / imma, or something slower) and kernel_report's name (which
candidates were timed at build).

    python benchmarks/int8_gemm_probe.py                    # the default shapes
    python benchmarks/int8_gemm_probe.py --shapes 8192x3072x768 --json probe.json
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

import numpy as np

# (M, N, K): BERT-base b64 s128's four GEMMs, ResNet-50 b256's layer1 and layer4 1x1s.
SHAPES = ["8192x2304x768", "8192x768x768", "8192x3072x768", "8192x768x3072",
          "802816x64x256", "802816x256x64", "25088x2048x512"]


def qdq_matmul_model(k: int, n: int, *, quantized_out: bool, seed: int = 0):
    """x [M, K] float -> Q/DQ (symmetric, per tensor) -> MatMul with per-channel
    int8 weights -> + bias -> ReLU [-> Q/DQ]: the imported-QDQ pipeline makes
    it one QMatMul (tests/test_gpu_tools.py checks on the simulated device)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, n)).astype(np.float32) * 0.05
    scale = np.maximum(np.abs(w).max(axis=0), 1e-6) / 127
    inits = {
        "x_s": np.float32(0.05), "x_z": np.int8(0),
        "w_q": np.clip(np.rint(w / scale), -127, 127).astype(np.int8), "w_s": scale.astype(np.float32),
        "w_z": np.zeros(n, np.int8), "b": rng.standard_normal(n).astype(np.float32) * 0.1,
        "y_s": np.float32(0.02), "y_z": np.int8(0),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["x_q"]),
        helper.make_node("DequantizeLinear", ["x_q", "x_s", "x_z"], ["x_dq"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w_dq"], axis=1),
        helper.make_node("MatMul", ["x_dq", "w_dq"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["pre"]),
        helper.make_node("Relu", ["pre"], ["act"]),
    ]
    y = "act"
    if quantized_out:
        nodes += [helper.make_node("QuantizeLinear", ["act", "y_s", "y_z"], ["y_q"]),
                  helper.make_node("DequantizeLinear", ["y_q", "y_s", "y_z"], ["y_dq"])]
        y = "y_dq"
    nodes.append(helper.make_node("Identity", [y], ["y"]))
    g = helper.make_graph(nodes, "qdq_matmul", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", n])],
                          [numpy_helper.from_array(np.asarray(v), name) for name, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def float_matmul_model(k: int, n: int, seed: int = 0):
    """x [M, K] @ w [K, N] + b -> ReLU in float32: twinfer's fp16 and fp8
    rows (precision="fp16" / "fp8": one FP8MatMul, cuBLASLt's FP8 GEMM)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32) * 0.05, "w"),
             numpy_helper.from_array(rng.standard_normal(n).astype(np.float32) * 0.1, "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["pre"]),
             helper.make_node("Relu", ["pre"], ["y"])]
    g = helper.make_graph(nodes, "float_matmul", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", n])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def cuda_ms(fn, iterations: int) -> float:
    """Median ms of fn() by CUDA events on the current stream, after 3 warm-up runs."""
    from gpu_vs_torch import time_cuda

    return time_cuda(fn, iterations, 3)


def torch_rows(m: int, n: int, k: int, iterations: int) -> list[dict]:
    import torch

    rows = []
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    w = torch.randn(n, k, device="cuda", dtype=torch.float16)
    rows.append({"form": "torch fp16 mm", "ms": cuda_ms(lambda: a @ w.t(), iterations)})
    a8 = torch.randint(-100, 100, (m, k), device="cuda", dtype=torch.int8)
    w8 = torch.randint(-100, 100, (n, k), device="cuda", dtype=torch.int8)
    try:
        rows.append({"form": "torch._int_mm int8->int32", "ms": cuda_ms(lambda: torch._int_mm(a8, w8.t()), iterations)})
    except (RuntimeError, AttributeError) as e:
        rows.append({"form": "torch._int_mm int8->int32", "error": str(e).splitlines()[0][:100]})
    try:
        af, wf = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        rows.append({"form": "torch._scaled_mm fp8->fp16", "ms": cuda_ms(
            lambda: torch._scaled_mm(af, wf.t(), scale_a=one, scale_b=one, out_dtype=torch.float16), iterations)})
    except (RuntimeError, AttributeError, TypeError) as e:
        rows.append({"form": "torch._scaled_mm fp8->fp16", "error": str(e).splitlines()[0][:100]})
    del a, w, a8, w8
    torch.cuda.empty_cache()
    return rows


def twinfer_rows(m: int, n: int, k: int, iterations: int, kernels: int) -> list[dict]:
    import torch

    import twinfer
    from gpu_profile import kernel_table

    rows = []
    x = torch.randn(m, k, device="cuda")
    calibration = [{"x": np.random.default_rng(i).standard_normal((64, k)).astype(np.float32)} for i in range(2)]
    forms = [("twinfer int8->int8", lambda: qdq_matmul_model(k, n, quantized_out=True), {}),
             ("twinfer int8->float", lambda: qdq_matmul_model(k, n, quantized_out=False), {}),
             ("twinfer fp16", lambda: float_matmul_model(k, n), {"precision": "fp16"}),
             ("twinfer fp8", lambda: float_matmul_model(k, n),
              {"precision": "fp8", "calibration": calibration, "progress": False})]
    for form, model, kw in forms:
        row = {"form": form}
        try:
            e = twinfer.load(model(), device="cuda", allow_cpu_fallback=False, **kw)
            row["ms"] = cuda_ms(lambda: e.run({"x": x}), iterations)
            report = e.kernel_report({"x": tuple(x.shape)})
            row["kernel_report"] = [f"{r.op}: {r.kernel}" for r in report if "MatMul" in r.op or "Gemm" in r.op]
            if kernels:
                row["kernels"] = kernel_table(e, {"x": x}, kernels)["kernels"]
            del e  # an Engine has no close(): its device memory goes with the last reference
        except Exception as ex:  # a probe reports what failed and goes on
            row["error"] = f"{type(ex).__name__}: {str(ex).splitlines()[0][:160]}"
        rows.append(row)
    del x
    torch.cuda.empty_cache()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="*", default=SHAPES, help="MxNxK each")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--kernels", type=int, default=4, metavar="N", help="CUPTI's N costliest kernels per twinfer row")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import twinfer

    if not twinfer.cuda_available():
        sys.exit("needs a CUDA GPU")
    warnings.filterwarnings("ignore")
    out = []
    print(f"{'M x N x K':>18}  {'form':<28} {'ms':>8} {'TOPS':>7}")
    for shape in args.shapes:
        m, n, k = (int(v) for v in shape.lower().split("x"))
        ops = 2.0 * m * n * k
        for row in torch_rows(m, n, k, args.iterations) + twinfer_rows(m, n, k, args.iterations, args.kernels):
            row["shape"] = [m, n, k]
            out.append(row)
            if "error" in row:
                print(f"{shape:>18}  {row['form']:<28} failed: {row['error']}")
                continue
            print(f"{shape:>18}  {row['form']:<28} {row['ms']:8.3f} {ops / row['ms'] / 1e9:7.1f}")
            for line in row.get("kernel_report", []):
                print(f"{'':>20}kernel_report {line[:200]}")
            for kr in row.get("kernels", []):
                print(f"{'':>20}{kr['ms']:8.3f} ms x{kr['launches']:.0f}  {kr['kernel']}")
        sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
