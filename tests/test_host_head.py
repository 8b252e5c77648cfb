"""A CPU model that takes strings: a scikit-learn pipeline whose categorical
columns come in as strings, one-hot encoded before a forest (skl2onnx's
ColumnTransformer). The nodes that read the strings are evaluated on every
run; the rest, the forest with it, is planned once per shape as an engine of
its own (runtime/host_head.h), where the host evaluator used to build every
kernel again on every run. Outputs against onnxruntime on fresh rows."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx_helpers import run_ort

import twinfer

pytest.importorskip("sklearn")
pytest.importorskip("skl2onnx")
pd = pytest.importorskip("pandas")

COLORS = np.array(["red", "green", "blue", "gray"])


def mixed_rows(rng, n):
    return rng.standard_normal((n, 5)).astype(np.float32), rng.choice(COLORS, size=(n, 2))


def feeds(num, cat):
    f = {f"x{i}": num[:, i:i + 1] for i in range(num.shape[1])}
    f.update(c0=cat[:, 0:1].astype(object), c1=cat[:, 1:2].astype(object))
    return f


def pipeline_model(zipmap):
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn import compose, ensemble, pipeline, preprocessing

    rng = np.random.default_rng(0)
    num, cat = mixed_rows(rng, 400)
    y = (num[:, 0] + (cat[:, 0] == "red") - (cat[:, 1] == "blue") > 0.3).astype(int)
    df = pd.DataFrame(num, columns=[f"x{i}" for i in range(5)]).assign(c0=cat[:, 0], c1=cat[:, 1])
    columns = compose.ColumnTransformer([("num", preprocessing.StandardScaler(), [f"x{i}" for i in range(5)]),
                                         ("cat", preprocessing.OneHotEncoder(), ["c0", "c1"])])
    est = pipeline.make_pipeline(columns, ensemble.RandomForestClassifier(20, max_depth=6, random_state=0))
    est.fit(df, y)
    types = [(f"x{i}", FloatTensorType([None, 1])) for i in range(5)]
    types += [("c0", StringTensorType([None, 1])), ("c1", StringTensorType([None, 1]))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_onnx(est, initial_types=types, target_opset={"": 17, "ai.onnx.ml": 3},
                       options={id(est.steps[-1][1]): {"zipmap": zipmap}})


@pytest.mark.parametrize("zipmap", [False, True])
def test_string_columns_evaluated_and_the_forest_planned(zipmap):
    m = pipeline_model(zipmap)
    engine = twinfer.load(m.SerializeToString(), device="cpu")
    stats = engine.stats()
    assert stats["host_head_nodes"] > 0 and stats["host_head_rest_nodes"] > 0, stats
    rng = np.random.default_rng(7)
    built = []
    for n in (1, 9, 9, 9, 70):  # the same shape three times: the rest's plan (and its forest) built once
        num, cat = mixed_rows(rng, n)
        f = feeds(num, cat)
        got = engine.run(f)
        want = run_ort(m, f)
        label, probabilities = (got[o.name] for o in m.graph.output)
        assert np.asarray(label.numpy()).tolist() == want[0].tolist()
        if zipmap:
            assert [sorted(d) for d in probabilities] == [sorted(d) for d in want[1]]
            np.testing.assert_allclose([[d[k] for k in sorted(d)] for d in probabilities],
                                       [[d[k] for k in sorted(d)] for d in want[1]], rtol=1e-6, atol=5e-7)
        else:
            # atol: on a row or two onnxruntime's sum of this forest's votes comes out 1.0000001
            # (a probability of -1.2e-7) where twinfer's, summed in double and rounded, is 1.
            np.testing.assert_allclose(probabilities.numpy(), want[1], rtol=1e-6, atol=5e-7)
        built.append(engine.stats()["host_head_rest_kernels_built"])
    assert built[0] > 0 and built[2] == built[3] == built[1], built


def test_a_bad_string_feed_is_an_error_that_names_it():
    m = pipeline_model(False)
    engine = twinfer.load(m.SerializeToString(), device="cpu")
    num, cat = mixed_rows(np.random.default_rng(3), 4)
    f = feeds(num, cat)
    f["c0"] = num[:, :1]  # floats where the model takes strings
    with pytest.raises(twinfer.Error, match="c0"):
        engine.run(f)
