"""Tree ensembles as their converters write them (scikit-learn by skl2onnx,
LightGBM by onnxmltools, and XGBoost and CatBoost where installed), twinfer
and onnxruntime in one process, interleaved blocks, one thread by default:
median ms per call at 1, 16 and 10,000 rows and the ratio twinfer /
onnxruntime (lower is better for twinfer). Models are trained on synthetic
data at start (a few seconds). Not a test: no assertion, a table and a JSON
line.

    python benchmarks/tree_ensembles.py [--threads N] [--rows 1,16,10000] [--only catboost]
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np

from interleaved import abba_medians  # benchmarks/interleaved.py


def models(only: str):
    """(name, ONNX bytes, input name, features) for each producer installed."""
    from sklearn import datasets

    x, y = datasets.make_classification(20000, 40, n_informative=20, n_classes=3, random_state=0)
    x = x.astype(np.float32)
    xr, yr = datasets.make_regression(20000, 40, random_state=0)
    xr = xr.astype(np.float32)
    names = np.array(["cat", "dog", "eel"])
    out = []

    def want(name):
        return only.lower() in name.lower()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from skl2onnx import to_onnx
        from sklearn.ensemble import RandomForestClassifier

        name = "sklearn RandomForest 100 x depth 10, str labels + ZipMap"
        if want(name):
            est = RandomForestClassifier(100, max_depth=10, random_state=0, n_jobs=1).fit(x[:5000], names[y[:5000]])
            out.append((name, to_onnx(est, x[:1], target_opset={"": 17, "ai.onnx.ml": 3}).SerializeToString()))
        try:
            import lightgbm
            import onnxmltools
            from onnxmltools.convert.common.data_types import FloatTensorType

            name = "LightGBM regressor 200 x 63 leaves"
            if want(name):
                est = lightgbm.LGBMRegressor(n_estimators=200, num_leaves=63, verbose=-1).fit(xr, yr)
                onx = onnxmltools.convert_lightgbm(est, initial_types=[("X", FloatTensorType([None, 40]))],
                                                   target_opset=15)
                out.append((name, onx.SerializeToString()))
            import xgboost

            name = "XGBoost classifier 100 x 3 classes, depth 6"
            if want(name):
                est = xgboost.XGBClassifier(n_estimators=100, max_depth=6).fit(x, y)
                onx = onnxmltools.convert_xgboost(est, initial_types=[("X", FloatTensorType([None, 40]))],
                                                  target_opset=15)
                out.append((name, onx.SerializeToString()))
        except ImportError as e:
            print(f"(skipped: {e.name} is not installed)")
        try:
            import os
            import tempfile

            import catboost

            for name, est, xs, ys in (
                    ("CatBoost classifier 300 x depth 6, 3 classes + ZipMap",
                     catboost.CatBoostClassifier(iterations=300, depth=6, verbose=0, loss_function="MultiClass",
                                                 thread_count=1, allow_writing_files=False), x, y),
                    ("CatBoost regressor 300 x depth 6", catboost.CatBoostRegressor(
                        iterations=300, depth=6, verbose=0, thread_count=1, allow_writing_files=False), xr, yr)):
                if not want(name):
                    continue
                est.fit(xs, ys)
                path = os.path.join(tempfile.mkdtemp(), "model.onnx")
                est.save_model(path, format="onnx")
                with open(path, "rb") as f:
                    out.append((name, f.read()))
        except ImportError:
            print("(skipped: catboost is not installed)")
    return out, x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rows", default="1,16,10000")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--block-seconds", type=float, default=0.3)
    ap.add_argument("--only", default="", help="run the models whose name contains this")
    args = ap.parse_args()
    import onnxruntime as ort

    import twinfer

    cases, x = models(args.only)
    results = {}
    print(f"{'model':58s} {'rows':>6s} {'twinfer ms':>11s} {'ort ms':>9s} {'ratio':>6s}   ({args.threads} thread(s))")
    for name, onx in cases:
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3  # CatBoost declares [N] and writes [N, 1]: a warning per run
        sess = ort.InferenceSession(onx, so, providers=["CPUExecutionProvider"])
        engine = twinfer.load(onx, device="cpu", num_threads=args.threads)
        input_name = sess.get_inputs()[0].name
        for rows in (int(r) for r in args.rows.split(",")):
            feeds = {input_name: x[:rows]}
            runs = {"twinfer": lambda: engine.run(feeds), "ort": lambda: sess.run(None, feeds)}
            medians = abba_medians(runs, args.blocks, args.block_seconds)
            tw, o = medians["twinfer"], medians["ort"]
            results[f"{name}, {rows} rows"] = (tw, o, tw / o)
            print(f"{name:58s} {rows:6d} {tw:11.3f} {o:9.3f} {tw / o:6.2f}", flush=True)
    print(json.dumps({"threads": args.threads, "ms": results}))


if __name__ == "__main__":
    main()
