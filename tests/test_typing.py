"""The type stub of the C++ core (python/twinfer/_core.pyi) against the
compiled module: every public function, class, method and property the module
has is declared, and nothing declared is missing from the module. (The public
Python API carries inline annotations; py.typed marks the package typed.)"""

from __future__ import annotations

import ast
from pathlib import Path

import twinfer
from twinfer import _core

STUB = Path(twinfer.__file__).resolve().parent / "_core.pyi"


def stub_names() -> dict[str, set[str]]:
    """{'' : module-level names, class name: its member names}."""
    tree = ast.parse(STUB.read_text())
    names: dict[str, set[str]] = {"": set()}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names[""].add(node.name)
        elif isinstance(node, ast.ClassDef):
            names[""].add(node.name)
            names[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    return names


def _bound(f) -> bool:
    """A constructor the bindings define (not pybind11's slot that refuses one)."""
    return type(f).__name__ == "instancemethod"


def module_names() -> dict[str, set[str]]:
    names: dict[str, set[str]] = {"": {n for n in dir(_core) if not n.startswith("__")}}
    for n in list(names[""]):
        obj = getattr(_core, n)
        if isinstance(obj, type):
            names[n] = {m for m in vars(obj) if m != "_pybind11_conduit_v1_" and (not m.startswith("__") or m in (
                "__dlpack__", "__dlpack_device__",
                "__array__", "__repr__") or (m == "__init__" and _bound(vars(obj)[m])))}  # pybind11 adds the conduit

    return names


def test_core_stub_matches_the_compiled_module():
    assert (Path(twinfer.__file__).resolve().parent / "py.typed").exists()
    stub, mod = stub_names(), module_names()
    assert stub[""] == mod[""], (stub[""] ^ mod[""])
    for cls in mod:
        if cls:
            assert stub[cls] == mod[cls], (cls, stub[cls] ^ mod[cls])
