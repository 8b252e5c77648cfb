"""Tree ensembles as the kernels walk them (csrc/ops/ml/tree_walk.h): forests
of random shape built by hand (unbalanced trees, a chain deeper than the
lockstep walk takes, every comparison alone and mixed, NaN features with
missing_value_tracks_true, features and thresholds drawn from one small grid
so that rows often sit exactly on a threshold), at row counts around the
walk's lanes (8) and blocks (64), against onnxruntime. Then the classifiers
whose ZipMap or string labels sent the whole graph to the host evaluator,
which rebuilt the forest on every run: their trees are now a plan's step."""

from __future__ import annotations

import warnings
import zlib

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_helpers import run_ort

import twinfer

ML = "ai.onnx.ml"
GRID = np.arange(-6, 7, dtype=np.float32) / 4  # features and thresholds: ties are common
MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


def random_forest(rng, trees, features, targets, modes, chain_depth=0):
    """Legacy tree attributes (nodes_*, target_*) of `trees` random trees,
    plus one chain of `chain_depth` branches (each with a leaf on one side)."""
    a = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values", "nodes_modes",
                         "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true",
                         "target_treeids", "target_nodeids", "target_ids", "target_weights")}

    rows = []  # the nodes' attribute entries, listed (below) in node id order as runtimes expect

    def node(tree, nid, mode, feature=0, value=0.0, true=0, false=0, missing=0):
        rows.append((tree, nid, feature, value, mode, true, false, missing))

    def leaf(tree, nid):
        node(tree, nid, "LEAF")
        for t in rng.choice(targets, size=int(rng.integers(1, targets + 1)), replace=False):
            a["target_treeids"].append(tree)
            a["target_nodeids"].append(nid)
            a["target_ids"].append(int(t))
            a["target_weights"].append(float(np.float32(rng.standard_normal())))

    def grow(tree, depth, count, max_depth):
        nid = count[0]
        count[0] += 1
        if depth == max_depth or (depth > 0 and rng.random() < 0.25):
            leaf(tree, nid)
            return nid
        mode, feature = str(rng.choice(modes)), int(rng.integers(features))
        value, missing = float(rng.choice(GRID)), int(rng.random() < 0.3)
        true, false = grow(tree, depth + 1, count, max_depth), grow(tree, depth + 1, count, max_depth)
        node(tree, nid, mode, feature, value, true, false, missing)
        return nid

    for t in range(trees):
        grow(t, 0, [0], int(rng.integers(1, 9)))
    if chain_depth:  # node 2k branches to leaf 2k+1 or to node 2k+2
        t = trees
        for k in range(chain_depth):
            node(t, 2 * k, str(rng.choice(modes)), int(rng.integers(features)), float(rng.choice(GRID)),
                 2 * k + 1, 2 * k + 2, int(rng.random() < 0.3))
            leaf(t, 2 * k + 1)
        leaf(t, 2 * chain_depth)
    for row in sorted(rows, key=lambda r: r[:2]):
        for k, v in zip(("treeids", "nodeids", "featureids", "values", "modes", "truenodeids", "falsenodeids",
                         "missing_value_tracks_true"), row):
            a["nodes_" + k].append(v)
    return a


def regressor(attrs, features, targets, aggregate, dtype=TensorProto.FLOAT, thresholds_as_double=False):
    attrs = dict(attrs)
    if thresholds_as_double:  # thresholds a float cannot hold: the walk compares in double
        values = np.array(attrs.pop("nodes_values"), np.float64) + 1e-9
        attrs["nodes_values_as_tensor"] = helper.make_tensor("v", TensorProto.DOUBLE, [len(values)], values)
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, n_targets=targets,
                            aggregate_function=aggregate, **attrs)
    g = helper.make_graph([node], "forest", [helper.make_tensor_value_info("X", dtype, [None, features])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, targets])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)])
    m.ir_version = 10
    return m


def rows_of(rng, n, features, dtype=np.float32):
    x = rng.choice(GRID, size=(n, features)).astype(dtype)
    x[rng.random(x.shape) < 0.1] = np.nan
    return x


@pytest.mark.parametrize("modes", [["BRANCH_LEQ"], ["BRANCH_LT"], ["BRANCH_GTE"], ["BRANCH_GT"], MODES],
                         ids=["leq", "lt", "gte", "gt", "mixed"])
@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_random_forests_like_onnxruntime(modes, aggregate):
    rng = np.random.default_rng(zlib.crc32(f"{modes} {aggregate}".encode()))
    features, targets = 5, 3
    # A chain of 40 branches: deeper than the lockstep walk (32), a row at a time.
    m = regressor(random_forest(rng, 23, features, targets, modes, chain_depth=40), features, targets, aggregate)
    engine = twinfer.load(m.SerializeToString(), device="cpu")
    for n in (1, 7, 8, 61, 150):  # one row, under a lane group, one group, groups and the rest, blocks of 64
        x = rows_of(rng, n, features)
        got = engine.run({"X": x})["Y"].numpy()
        (want,) = run_ort(m, {"X": x})
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"{n} rows")


@pytest.mark.parametrize("case", ["double features", "double thresholds"])
def test_forests_compared_in_double(case):
    rng = np.random.default_rng(11)
    features, targets = 4, 2
    # LEQ tells double features just past a float threshold from ones on it;
    # LT, features on a float threshold from ones under its double one.
    attrs = random_forest(rng, 17, features, targets, ["BRANCH_LEQ" if case == "double features" else "BRANCH_LT"])
    if case == "double features":
        m = regressor(attrs, features, targets, "SUM", dtype=TensorProto.DOUBLE)
        x = rows_of(rng, 77, features, np.float64)
        x[::5, 0] = x[::5, 0] + 1e-12  # just past a threshold in double, on it in float
    else:
        m = regressor(attrs, features, targets, "SUM", thresholds_as_double=True)
        x = rows_of(rng, 77, features)  # on a float threshold, just under its double one
    got = twinfer.load(m.SerializeToString(), device="cpu").run({"X": x})["Y"].numpy()
    # onnxruntime and the ONNX reference evaluator both refuse double
    # thresholds for float features: a walk in Python (float64) instead.
    if case == "double features":
        (want,) = run_ort(m, {"X": x})
    else:
        values = np.array(attrs["nodes_values"], np.float64) + 1e-9
        want = python_forest(dict(attrs, nodes_values=values), x.astype(np.float64), targets)
        assert np.any(np.isin(x, GRID))  # rows sit on the float thresholds, under the double ones
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def python_forest(a, x, targets):
    """TreeEnsembleRegressor (SUM, no base values) row by row in Python."""
    at = {(t, n): i for i, (t, n) in enumerate(zip(a["nodes_treeids"], a["nodes_nodeids"]))}
    weights = {}
    for t, n, k, w in zip(a["target_treeids"], a["target_nodeids"], a["target_ids"], a["target_weights"]):
        weights.setdefault((t, n), []).append((k, w))
    compare = {"BRANCH_LEQ": np.less_equal, "BRANCH_LT": np.less, "BRANCH_GTE": np.greater_equal,
               "BRANCH_GT": np.greater, "BRANCH_EQ": np.equal, "BRANCH_NEQ": np.not_equal}
    y = np.zeros((len(x), targets))
    for r, row in enumerate(x):
        for tree in sorted(set(a["nodes_treeids"])):
            i = at[(tree, 0)]
            while a["nodes_modes"][i] != "LEAF":
                v, mode = row[a["nodes_featureids"][i]], a["nodes_modes"][i]
                if np.isnan(v):
                    true = bool(a["nodes_missing_value_tracks_true"][i]) or mode == "BRANCH_NEQ"
                else:
                    true = bool(compare[mode](v, a["nodes_values"][i]))
                i = at[(tree, a["nodes_truenodeids"][i] if true else a["nodes_falsenodeids"][i])]
            for k, w in weights.get((tree, a["nodes_nodeids"][i]), []):
                y[r, k] += w
    return y


# --- classifiers: ZipMap and string labels --------------------------------------------

def _sklearn_forest(labels):
    pytest.importorskip("sklearn")
    pytest.importorskip("skl2onnx")
    from sklearn import datasets, ensemble
    from skl2onnx import to_onnx

    x, y = datasets.make_classification(n_samples=300, n_features=9, n_informative=5, n_classes=3, random_state=4)
    x = x.astype(np.float32)
    if labels == "str":
        y = np.array(["cat", "dog", "eel"])[y]
    est = ensemble.RandomForestClassifier(n_estimators=12, max_depth=6, random_state=0).fit(x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_onnx(est, x[:1], target_opset={"": 17, ML: 3})  # with ZipMap, as skl2onnx writes by default


@pytest.mark.parametrize("labels", ["int", "str"])
@pytest.mark.parametrize("saved", [False, True])
def test_classifier_before_zipmap_runs_as_a_plan(labels, saved, tmp_path):
    m = _sklearn_forest(labels)
    engine = twinfer.load(m.SerializeToString(), device="cpu")
    if saved:  # the rewritten labels (a LabelEncoder) go into engine files too
        engine.save(tmp_path / "forest.twinfer")
        engine = twinfer.load(tmp_path / "forest.twinfer")
    x = np.random.default_rng(2).standard_normal((45, 9)).astype(np.float32) * 2
    got = engine.run({"X": x})
    want = run_ort(m, {"X": x})
    label, probabilities = (got[o.name] for o in m.graph.output)
    label = np.asarray(label.numpy() if hasattr(label, "numpy") else label)
    assert label.tolist() == want[0].tolist()
    assert isinstance(probabilities, list) and len(probabilities) == len(want[1])
    for g, w in zip(probabilities, want[1]):
        assert g.keys() == w.keys()
        np.testing.assert_allclose([g[k] for k in w], [w[k] for k in w], rtol=1e-6, atol=1e-7)
    # Called positionally too: the rows as dicts, the labels as the run gave them.
    called_label, called_probabilities = engine(x)
    assert np.asarray(called_label.numpy()).tolist() == label.tolist() and called_probabilities == probabilities
    # The forest is a step of a plan (built once), not a node the host
    # evaluator builds again on every run (the whole graph went there: its
    # ZipMap makes a sequence of maps, its string labels strings).
    profile = engine.profile_ops({"X": x}, iterations=2, warmup=1)
    assert not profile.eager
    assert any("TreeEnsembleClassifier" in s.op for s in profile.steps), [s.op for s in profile.steps]
