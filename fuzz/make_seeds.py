"""Seed corpora for the fuzz targets, from the models the tests use.

    python fuzz/make_seeds.py OUT_DIR

OUT_DIR/onnx/   the ONNX backend suite's models that tests/test_conformance.py
                runs (node cases, built in memory by onnx; simple and
                pytorch-converted/operator files), those up to 64 KiB, plus
                a few with external data that point into the fuzz targets'
                folder ("weights.bin", see onnx_reader_fuzzer.cc).
OUT_DIR/engine/ those that twinfer loads, saved as engine files
                (needs twinfer importable: PYTHONPATH=build/dev-NAME/pkg).

Small seeds keep each execution fast; libFuzzer grows inputs from them.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MAX_SEED_BYTES = 64 * 1024


def suite_models():
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kind in ("node", "simple", "pytorch-converted", "pytorch-operator"):
            for case in load_model_tests(kind=kind):
                if case.model is not None:
                    yield case.name, case.model.SerializeToString()
                elif case.model_dir is not None:
                    path = Path(case.model_dir) / "model.onnx"
                    if path.exists() and path.stat().st_size <= MAX_SEED_BYTES:
                        yield case.name, path.read_bytes()


def external_data_models():
    """Models whose weights live in weights.bin (4096 bytes) next to them."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    for offset, extra in ((0, []), (64, [("length", "16")]), (4080, [])):
        w = numpy_helper.from_array(np.zeros(4, np.float32), "w")
        w.ClearField("raw_data")
        w.data_location = TensorProto.EXTERNAL
        for key, value in [("location", "weights.bin"), ("offset", str(offset))] + extra:
            w.external_data.add(key=key, value=value)
        g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "ext", [x], [y], [w])
        yield f"external_{offset}", helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def function_models():
    """Models calling local functions (nested, with attribute references and
    defaults), so mutations reach the function expansion."""
    slope = helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT)
    leaky = helper.make_node("LeakyRelu", ["s"], ["b"])
    leaky.attribute.append(slope)
    inner = helper.make_function("local", "Inner", ["a", "c"], ["b", "s"], [helper.make_node("Add", ["a", "c"], ["s"]), leaky],
                                 [helper.make_opsetid("", 17)])
    inner.attribute_proto.append(helper.make_attribute("alpha", 0.2))
    outer = helper.make_function("local", "Outer", ["u"], ["v"],
                                 [helper.make_node("Inner", ["u", "u"], ["t"], domain="local", alpha=0.5),
                                  helper.make_node("Inner", ["t", "u"], ["v", ""], domain="local")],
                                 [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    g = helper.make_graph([helper.make_node("Outer", ["x"], ["y"], domain="local")], "fn", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                          functions=[outer, inner])
    yield "functions", m.SerializeToString()


def write(folder: Path, name: str, data: bytes) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / (name + "-" + hashlib.sha1(data).hexdigest()[:8])).write_bytes(data)


def main(out: Path) -> None:
    onnx_seeds = [(n, b) for n, b in suite_models() if len(b) <= MAX_SEED_BYTES]
    onnx_seeds += list(external_data_models())
    onnx_seeds += list(function_models())
    for name, data in onnx_seeds:
        write(out / "onnx", name, data)
    print(f"{len(onnx_seeds)} ONNX seeds in {out / 'onnx'}")

    try:
        import twinfer
    except ImportError:
        print("twinfer is not importable: no engine seeds (set PYTHONPATH=build/dev-NAME/pkg)")
        return
    saved = 0
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = Path(tmp) / "e.twinfer"
        for name, data in onnx_seeds:
            try:
                twinfer.load(data).save(path)
            except Exception:  # noqa: BLE001 - a model twinfer refuses is simply not a seed
                continue
            blob = path.read_bytes()
            if len(blob) <= MAX_SEED_BYTES:
                write(out / "engine", name, blob)
                saved += 1
    print(f"{saved} engine seeds in {out / 'engine'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
