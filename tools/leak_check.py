"""Leak check for the core under LeakSanitizer (run by tools/sanitize.sh,
which preloads ASan's runtime and sets PYTHONMALLOC=malloc).

It exercises what a long-lived process does with twinfer, successes and
failures alike (exceptions thrown through the bindings are where C++ leaks
hide): loading from a path, bytes, external data and a saved engine; runs at
several shapes, from several threads, on the CPU and the simulated device;
If and NonZero (the evaluator); bad inputs and bad models raising errors.
Then it drops every engine, collects garbage, and asks LeakSanitizer for a
report while Python is still alive: every Python object is then reachable
from the interpreter (PYTHONMALLOC=malloc puts them where LSan looks), so
what LSan reports is memory nothing points to any more. Checking at exit
instead would report what CPython deliberately never frees at shutdown.

Exit status 1 when LeakSanitizer found a leak (its report is in the log).
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import twinfer

vi = helper.make_tensor_value_info


def model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "leak_check", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def mlp():
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 8)).astype(np.float32), "w2")
    return model([helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
                  helper.make_node("MatMul", ["r", "w2"], ["y"])],
                 [vi("x", T.FLOAT, ["n", 16])], [vi("y", T.FLOAT, ["n", 8])], [w1, w2])


def conv():
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    return model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                  helper.make_node("GlobalAveragePool", ["c"], ["y"])],
                 [vi("x", T.FLOAT, ["n", 3, 12, 12])], [vi("y", T.FLOAT, ["n", 8, 1, 1])], [w])


def if_and_nonzero():
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [vi("t", T.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [], [vi("e", T.FLOAT, None)])
    return model([helper.make_node("If", ["c"], ["v"], then_branch=then_g, else_branch=else_g),
                  helper.make_node("NonZero", ["v"], ["y"])],
                 [vi("x", T.FLOAT, [5]), vi("c", T.BOOL, [])], [vi("y", T.INT64, None)])


def expect_error(fn):
    try:
        fn()
    except twinfer.Error:
        return
    raise AssertionError("expected a twinfer.Error")


def exercise(folder: Path) -> None:
    rng = np.random.default_rng(2)
    m = mlp()
    path = folder / "mlp.onnx"
    onnx.save(m, str(path))
    ext = folder / "ext.onnx"
    on_disk = onnx.ModelProto()
    on_disk.CopyFrom(m)  # save_model points its argument at the external file
    onnx.save_model(on_disk, str(ext), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.bin", size_threshold=0)
    engines = [twinfer.load(str(path)), twinfer.load(m.SerializeToString()), twinfer.load(str(ext)),
               twinfer.load(m, device="sim")]
    saved = folder / "mlp.twinfer"
    engines[0].save(saved)
    engines.append(twinfer.load(str(saved)))
    for e in engines:
        for n in (1, 3, 7):
            e.run({"x": rng.standard_normal((n, 16)).astype(np.float32)})["y"].numpy()
        expect_error(lambda: e.run({"x": np.zeros((2, 15), np.float32)}))
        expect_error(lambda: e.run({"x": np.zeros((2, 16), np.float64)}))
        expect_error(lambda: e.run({}))

    c = twinfer.load(conv())
    def worker(k):
        r = np.random.default_rng(k)
        for n in (1, 2, 4, 2, 1):
            c.run({"x": r.standard_normal((n, 3, 12, 12)).astype(np.float32)})
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()

    f = twinfer.load(if_and_nonzero())
    for cond in (True, False):
        f.run({"x": np.array([1, 0, -2, 0, 3], np.float32), "c": np.array(cond)})

    # Failures at load and at run.
    expect_error(lambda: twinfer.load(b"\x08\x07\x12\x03abc"))
    expect_error(lambda: twinfer.load(model([helper.make_node("NoSuchOp", ["x"], ["y"])],
                                            [vi("x", T.FLOAT, [2])], [vi("y", T.FLOAT, [2])])))
    rg = twinfer.load(model([helper.make_node("Range", ["a", "b", "d"], ["y"])], [vi(n, T.FLOAT, []) for n in "abd"],
                            [vi("y", T.FLOAT, None)]))
    expect_error(lambda: rg.run({"a": np.float32(0), "b": np.float32(np.nan), "d": np.float32(1)}))
    expect_error(lambda: twinfer.load(model([helper.make_node("Relu", ["x"], ["y"])],
                                            [vi("x", T.FLOAT, [1 << 30] * 3)], [vi("y", T.FLOAT, None)])))


def rounds() -> None:
    # In a function of its own, returned from before the check: CPython 3.11
    # keeps frames (and so their locals) in memory of its own that LSan does
    # not scan, so an object held only by a live frame's local looks leaked
    # (the temporary folder's name did, when this loop was in main()).
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(3):  # the first round fills process-wide caches; the later ones must add nothing
            exercise(Path(tmp))


def main() -> int:
    leak_check = getattr(ctypes.CDLL(None), "__lsan_do_recoverable_leak_check", None)
    if leak_check is None:
        print("leak_check: LeakSanitizer is not loaded (run it through tools/sanitize.sh)", file=sys.stderr)
        return 2
    rounds()
    gc.collect()
    leaked = leak_check()
    print("leak_check:", "LEAKS (see the LeakSanitizer report)" if leaked else "no leaks")
    sys.stdout.flush()
    return 1 if leaked else 0


if __name__ == "__main__":
    code = main()
    os._exit(code)  # no exit-time check: CPython does not free everything at shutdown
