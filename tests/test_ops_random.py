"""The random ops (RandomNormal, RandomUniform, their *Like forms, Bernoulli,
Multinomial), checked statistically (tests/statistical.py: tests that fail a
right implementation once in a million runs and a wrong mean, spread or
probability almost surely), plus shapes, dtypes, seeds and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from scipy import special, stats
from statistical import assert_bernoulli, assert_categorical, assert_distribution

import twinfer
import twinfer.backend

F, D, H = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16
NP = {F: np.float32, D: np.float64, H: np.float16}


def model(node, inputs=(), out_type=F, opset=21):
    g = helper.make_graph([node], "random", list(inputs), [helper.make_tensor_value_info("y", out_type, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def run(m, *inputs):
    return twinfer.backend.prepare(m).run(list(inputs))[0]


@pytest.mark.parametrize("dtype", [F, D, H])
@pytest.mark.parametrize("mean,scale", [(0.0, 1.0), (3.5, 0.25), (-20.0, 7.0)])
def test_random_normal(dtype, mean, scale):
    node = helper.make_node("RandomNormal", [], ["y"], shape=[40, 501], mean=mean, scale=scale, dtype=dtype)
    y = run(model(node, out_type=dtype))
    assert y.shape == (40, 501) and y.dtype == NP[dtype]
    assert_distribution(y, stats.norm(mean, scale), f"N({mean}, {scale}^2)")


@pytest.mark.parametrize("dtype", [F, D])
@pytest.mark.parametrize("low,high", [(0.0, 1.0), (-3.0, 5.5)])
def test_random_uniform(dtype, low, high):
    node = helper.make_node("RandomUniform", [], ["y"], shape=[7, 3001], low=low, high=high, dtype=dtype)
    y = run(model(node, out_type=dtype))
    assert y.shape == (7, 3001) and y.dtype == NP[dtype]
    assert y.min() >= low and y.max() <= high
    assert_distribution(y, stats.uniform(low, high - low), f"U[{low}, {high})")


@pytest.mark.parametrize("op,dist", [("RandomNormalLike", stats.norm(1.0, 2.0)),
                                     ("RandomUniformLike", stats.uniform(1.0, 2.0))])
@pytest.mark.parametrize("in_type,dtype", [(F, None), (D, None), (TensorProto.INT32, F), (F, D)])
def test_like_ops_take_the_input_shape_and_type(op, dist, in_type, dtype):
    attrs = {"mean": 1.0, "scale": 2.0} if "Normal" in op else {"low": 1.0, "high": 3.0}
    if dtype is not None:
        attrs["dtype"] = dtype
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    x = np.zeros((3, 50, 67), dtype=helper.tensor_dtype_to_np_dtype(in_type))
    y = run(model(node, [helper.make_tensor_value_info("x", in_type, [3, 50, 67])], dtype or in_type), x)
    assert y.shape == x.shape and y.dtype == NP[dtype or in_type]
    assert_distribution(y, dist, op)


def test_seed_reproducible_and_each_run_new():
    def build(seed=None):
        kw = {} if seed is None else {"seed": seed}
        return twinfer.backend.prepare(model(helper.make_node("RandomNormal", [], ["y"], shape=[64], **kw)))

    a, b = build(2.0), build(2.0)
    first = a.run([])[0]
    np.testing.assert_array_equal(first, b.run([])[0])  # same seed: same stream
    second = a.run([])[0]
    assert not np.array_equal(first, second)  # the next run draws anew
    np.testing.assert_array_equal(second, b.run([])[0])
    assert not np.array_equal(first, build(3.0).run([])[0])
    assert not np.array_equal(build().run([])[0], build().run([])[0])  # unseeded


@pytest.mark.parametrize("out", [None, TensorProto.BOOL, TensorProto.INT32, D])
def test_bernoulli(out):
    rng = np.random.default_rng(0)
    p = np.concatenate([[0.0, 1.0, 0.5, 1e-3], rng.random(60)]).astype(np.float32)
    reps = 3000
    attrs = {} if out is None else {"dtype": out}
    node = helper.make_node("Bernoulli", ["x"], ["y"], **attrs)
    m = model(node, [helper.make_tensor_value_info("x", F, [reps, p.size])], out or F, opset=15)
    y = run(m, np.tile(p, (reps, 1)))
    assert y.shape == (reps, p.size) and y.dtype == (np.float32 if out is None else helper.tensor_dtype_to_np_dtype(out))
    assert_bernoulli(y, p, "Bernoulli")


def test_bernoulli_refuses_a_probability_outside_0_1():
    node = helper.make_node("Bernoulli", ["x"], ["y"], name="coin")
    m = model(node, [helper.make_tensor_value_info("x", F, [3])], opset=15)
    with pytest.raises(twinfer.InvalidArgumentError, match="coin.*1.5.* not in \\[0, 1\\]"):
        run(m, np.array([0.2, 1.5, 0.1], np.float32))


@pytest.mark.parametrize("dtype", [TensorProto.INT32, TensorProto.INT64])
@pytest.mark.parametrize("in_type", [F, D])
def test_multinomial(dtype, in_type):
    logits = np.array([[0.0, 1.0, -2.0, 0.5], [3.0, 3.0, -np.inf, 0.0], [-50.0, -49.0, -48.0, -60.0]])
    node = helper.make_node("Multinomial", ["x"], ["y"], sample_size=20000, dtype=dtype, seed=5.0)
    m = model(node, [helper.make_tensor_value_info("x", in_type, [3, 4])], dtype, opset=7)
    y = run(m, logits.astype(NP[in_type]))
    assert y.shape == (3, 20000) and y.dtype == helper.tensor_dtype_to_np_dtype(dtype)
    for row, logit in zip(y, logits):
        assert_categorical(row, special.softmax(logit), "Multinomial")


def test_bad_attributes_are_refused():
    m = model(helper.make_node("RandomNormal", [], ["y"], shape=[2], scale=-1.0, name="rn"))
    with pytest.raises(twinfer.InvalidArgumentError, match="rn.*scale"):
        run(m)
    m = model(helper.make_node("RandomUniform", [], ["y"], shape=[2], low=2.0, high=1.0, name="ru"))
    with pytest.raises(twinfer.InvalidArgumentError, match="ru.*high"):
        run(m)
    m = model(helper.make_node("RandomUniform", [], ["y"], shape=[2], dtype=TensorProto.INT32), out_type=TensorProto.INT32)
    with pytest.raises(twinfer.Error, match="float16, float or double"):
        run(m)
    node = helper.make_node("Multinomial", ["x"], ["y"], dtype=TensorProto.FLOAT)
    m = model(node, [helper.make_tensor_value_info("x", F, [1, 3])], F, opset=7)
    with pytest.raises(twinfer.Error, match="int32 or int64"):
        run(m, np.zeros((1, 3), np.float32))
