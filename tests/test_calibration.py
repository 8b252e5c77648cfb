"""INT8 calibration: the range observers against NumPy and a plain-loop KL
implementation, the activations an engine exposes for calibration, and
calibrate() end to end on a small model (ranges vs. NumPy on the same data)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from twinfer.quantize import Calibration, HistogramObserver, MinMaxObserver, calibrate, quantizable_activations


def batches(rng, n=6):
    # growing magnitude, so the histogram's range doubles several times
    return [rng.standard_normal((3, 37)).astype(np.float32) * (1.5 ** k) for k in range(n)]


def test_minmax_observer_matches_numpy(rng):
    data = batches(rng)
    ob = MinMaxObserver()
    for b in data:
        ob.update(b)
    allv = np.concatenate([b.ravel() for b in data])
    assert ob.min == allv.min() and ob.max == allv.max() and ob.amax == np.abs(allv).max()


def test_histogram_doubling_equals_one_histogram_at_the_final_range(rng):
    data = batches(rng, 8)
    ob = HistogramObserver(bins=512)
    for b in data:
        ob.update(b)
    allv = np.abs(np.concatenate([b.ravel() for b in data]))
    ref, _ = np.histogram(allv, bins=512, range=(0, ob.top))
    assert ob.hist.sum() == allv.size
    assert np.abs(ob.hist - ref).sum() <= 2  # values on a bin edge may land either side
    assert ob.top >= allv.max()


@pytest.mark.parametrize("q", [50.0, 99.0, 99.99])
def test_percentile_is_within_one_bin_of_numpy(rng, q):
    data = batches(rng, 5)
    ob = HistogramObserver(bins=2048)
    for b in data:
        ob.update(b)
    # The order statistic at that rank lies in the bin whose upper edge we return.
    ref = np.percentile(np.abs(np.concatenate([b.ravel() for b in data])), q, method="inverted_cdf")
    assert ref <= ob.percentile(q) <= ref + ob.bin_width * 1.01


def kl_threshold_reference(hist, bin_width, levels=128):
    """TensorRT's entropy calibration written out with plain loops."""
    best, best_i = float("inf"), None
    nbins = len(hist)
    last = max(i for i in range(nbins) if hist[i] > 0) + 1
    for i in range(levels, last + 1):
        p = [float(h) for h in hist[:i]]
        p[-1] += float(sum(hist[i:]))
        mass, nonzero = [0.0] * levels, [0] * levels
        for j in range(i):
            mass[(j * levels) // i] += float(hist[j])
            nonzero[(j * levels) // i] += p[j] > 0
        q = [mass[(j * levels) // i] / nonzero[(j * levels) // i] if p[j] > 0 else 0.0 for j in range(i)]
        ps, qs = sum(p), sum(q)
        kl = 0.0
        for a, b in zip(p, q):
            if a > 0:
                if b == 0:
                    kl = float("inf")
                    break
                kl += (a / ps) * np.log((a / ps) / (b / qs))
        if kl < best:
            best, best_i = kl, i
    return (best_i + 0.5) * bin_width


def test_entropy_matches_a_loop_implementation_and_clips_outliers(rng):
    x = np.concatenate([rng.standard_normal(20000), [12.0, -13.0, 15.0]]).astype(np.float32)
    ob = HistogramObserver(bins=1024)
    ob.update(x)
    t = ob.entropy(levels=128)
    assert t == pytest.approx(min(ob.amax, kl_threshold_reference(ob.hist, ob.bin_width, levels=128)))
    assert 2.0 < t < 12.0  # below the outliers, above the bulk of the Gaussian


def test_entropy_of_relu_outputs_ignores_the_zero_spike(rng):
    # Half the values exactly 0 (a ReLU's output) plus rare outliers: the
    # threshold still falls between the bulk and the outliers. With the zeros
    # in the first bin, the search chose its smallest candidate (128 bins).
    x = np.maximum(np.concatenate([rng.standard_normal(40000), [12.0, 13.0, 15.0]]), 0).astype(np.float32)
    ob = HistogramObserver(bins=2048)
    ob.update(x)
    assert ob.zeros == np.count_nonzero(x == 0) and ob.hist.sum() == np.count_nonzero(x)
    t = ob.entropy()
    assert 2.0 < t < 12.0, t
    # The reference loop over the histogram without zeros, with uint8's 256 levels.
    assert t == pytest.approx(kl_threshold_reference(ob.hist, ob.bin_width, levels=256))
    # Percentiles still count the zeros.
    ref = np.percentile(x, 70.0, method="inverted_cdf")
    assert ref <= ob.percentile(70.0) <= ref + ob.bin_width * 1.01


def test_entropy_keeps_the_range_of_a_clipped_activation(rng):
    # A skewed bulk near 0 and 0.2% of the values exactly 6, as after a
    # ReLU6: the KL search alone usually cuts this near 2 (flattening what the
    # network saturates on purpose); a tensor that often sits exactly at its
    # peak keeps its whole range.
    x = rng.lognormal(-2, 0.8, 60000)
    x[rng.random(x.size) < 0.002] = 6
    x = np.clip(x, 0, 6).astype(np.float32)
    ob = HistogramObserver()
    for b in np.split(x, 3):
        ob.update(b)
    assert ob.at_peak == np.count_nonzero(x == 6)
    assert ob.entropy() == 6.0


def small_model():
    # x -> Relu -> Conv(w) -> Add -> MatMul(h, m) with m an input: activations r, c_out(+b), and m
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(np.float32(0.5), "b")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Conv", ["r", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "b"], ["h"]),
        helper.make_node("MatMul", ["h", "m"], ["y"]),
    ]
    g = helper.make_graph(nodes, "calib", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 5, 7]),
                                           helper.make_tensor_value_info("m", TensorProto.FLOAT, [7, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_extra_outputs_expose_intermediates(rng):
    m = small_model()
    e = twinfer.load(m, device="cpu", extra_outputs=["r", "h"])
    assert [s.name for s in e.outputs] == ["y", "r", "h"]
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    out = e.run({"x": x, "m": rng.standard_normal((7, 2)).astype(np.float32)})
    np.testing.assert_array_equal(out["r"].numpy(), np.maximum(x, 0))
    with pytest.raises(twinfer.InvalidArgumentError, match="not a value"):
        twinfer.load(m, device="cpu", extra_outputs=["nope"])


@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy"])
def test_calibrate_end_to_end(rng, method, tmp_path):
    m = small_model()
    assert quantizable_activations(m) == ["r", "h", "m"]
    data = [{"x": rng.standard_normal((2, 3, 5, 7)).astype(np.float32),
             "m": rng.standard_normal((7, 2)).astype(np.float32)} for _ in range(5)]
    cal = calibrate(m, data, calibrator=method, progress=False)
    assert cal.samples == 5 and set(cal.amax) == {"r", "h", "m"}
    r_max = max(float(np.maximum(d["x"], 0).max()) for d in data)
    m_abs = max(float(np.abs(d["m"]).max()) for d in data)
    assert cal.observed["r"][1] == pytest.approx(r_max)
    if method == "minmax":
        assert cal.amax["r"] == pytest.approx(r_max) and cal.amax["m"] == pytest.approx(m_abs)
    else:
        assert 0 < cal.amax["r"] <= r_max * (1 + 1e-6)
    path = tmp_path / "cal.json"
    cal.save(path)
    again = Calibration.load(path)
    assert again.amax == cal.amax and again.method == method
    with pytest.raises(twinfer.InvalidArgumentError, match="calibrator"):
        calibrate(m, data, calibrator="median")
