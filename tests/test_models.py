"""The five model families, exported by both PyTorch exporters, against
onnxruntime on fresh random inputs (random weights), plus the memory planner
on a real model."""

import numpy as np
import pytest

import twinfer
from model_zoo import EXPORTERS, FAMILIES, export, random_feeds


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    cache = {}

    def get(family, exporter):
        if (family, exporter) not in cache:
            cache[(family, exporter)] = export(family, exporter, folder)
        return cache[(family, exporter)]

    return get


def _ort(path, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _rel_err(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / max(np.linalg.norm(b.astype(np.float64)), 1e-30))


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("family", FAMILIES)
def test_family_matches_onnxruntime(family, exporter, exported, rng, device):
    path = exported(family, exporter)
    engine = twinfer.load(path, device=device)
    for batch in (1, 3, 3, 3):  # the repeats replay a captured graph on a GPU (and the simulated one)
        feeds = random_feeds(family, rng, batch)
        (expected,) = _ort(path, feeds)
        out = engine.run(feeds)
        (got,) = [t.numpy() for t in out.values()]
        assert got.shape == expected.shape
        assert _rel_err(got, expected) < 2e-4, f"{family}/{exporter} batch {batch}"
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3 * float(np.abs(expected).max()))


def test_arena_peak_is_far_below_the_naive_sum(exported):
    engine = twinfer.load(exported("resnet50", "torchscript"), device="cpu")
    report = engine.memory_report([[8, 3, 64, 64]])
    # Every intermediate of ResNet-50 in its own buffer vs. liveness-shared offsets.
    assert report["arena_bytes"] * 4 < report["naive_bytes"], report
    assert report["constant_bytes"] > 90e6  # ~25.5M float32 parameters


def test_passes_shrink_resnet(exported):
    # The TorchScript export carries 47 Identity nodes and separate Relu/Add
    # nodes; identity elimination and Conv epilogue fusion remove them.
    engine = twinfer.load(exported("resnet50", "torchscript"), device="cpu")
    stats = engine.stats()
    hist = engine.op_histogram()
    assert "Identity" not in hist and "Relu" not in hist, hist
    assert stats["nodes_optimized"] < stats["nodes_in_model"] // 2, stats


@pytest.mark.cuda_build
@pytest.mark.parametrize("family", FAMILIES)
def test_every_node_has_a_cuda_kernel(family, exported, rng):
    # Placement as cuda:0 would do it (the simulated device with CUDA's
    # coverage): no node falls back to the CPU, so no copies in the run.
    path = exported(family, "torchscript")
    engine = twinfer.load(path, device="sim", sim_coverage="cuda", allow_cpu_fallback=False)
    feeds = random_feeds(family, rng, 2)
    rows = engine.kernel_report({k: v.shape for k, v in feeds.items()})
    assert all(r.backend == "sim" for r in rows), [r for r in rows if r.backend != "sim"][:5]
    (expected,) = _ort(path, feeds)
    (got,) = [t.numpy() for t in engine.run(feeds).values()]
    assert _rel_err(got, expected) < 2e-4


@pytest.mark.cuda_build
@pytest.mark.parametrize("family", ["resnet50", "mobilenet_v2", "efficientnet_b0"])
def test_fp16_cnns_are_channels_last_with_every_node_on_cuda(family, exported):
    # Placement as cuda:0 would do it at fp16: the channels_last pass makes
    # each CNN one NHWC region (a transpose in, one out), and the CUDA
    # kernels' supports() take every node of it.
    path = exported(family, "torchscript")
    engine = twinfer.load(path, device="sim", sim_coverage="cuda", allow_cpu_fallback=False, precision="fp16")
    rows = engine.kernel_report({"input": (2, 3, 64, 64)})
    assert all(r.backend == "sim" for r in rows), [r for r in rows if r.backend != "sim"][:5]
    ops = [r.op for r in rows]
    convs = [op for op in ops if op.endswith("Conv")]
    assert convs and all(op == "com.twinfer.nhwc::Conv" for op in convs), sorted(set(ops))
    assert ops.count("Transpose") == 2, ops


@pytest.mark.cuda_build
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("family", FAMILIES)
def test_sim_16bit_plans_cast_only_the_graph_edges(family, precision, exported, rng):
    # On cuda:0 every float node of these models computes in the 16-bit type.
    # The simulated device runs the CPU kernels, so lower_precision lowers a
    # node there only when its CPU kernel takes the type too; one that does
    # not stays float32 between Casts named "<value>@float32" (the pools and
    # LayerNormalization did), and CI would test another graph than the GPU's.
    path = exported(family, "torchscript")
    engine = twinfer.load(path, device="sim", sim_coverage="cuda", allow_cpu_fallback=False, precision=precision)
    feeds = random_feeds(family, rng, 2)
    rows = engine.kernel_report({k: v.shape for k, v in feeds.items()})
    back = [r.node for r in rows if r.op == "Cast" and r.node.endswith("@float32")]
    assert back == ["output@float32"], back  # only the graph's output goes back to float32
    (expected,) = _ort(path, feeds)
    (got,) = [t.numpy() for t in engine.run(feeds).values()]
    assert got.dtype == np.float32
    assert _rel_err(got, expected) < (4e-3 if precision == "fp16" else 3e-2), f"{family} {precision}"
