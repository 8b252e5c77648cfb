"""The layers keep to one direction (docs/architecture.md, "One direction, no
back edges"), checked on the sources themselves, no build needed:

- C++: which folders of csrc/ a file may include from (#include "dir/...");
- Python: no module of python/twinfer imports, directly or through others,
  one that imports it back (imports inside functions count; those under
  `if TYPE_CHECKING:` do not, they never run).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
PKG = ROOT / "python" / "twinfer"

# Folders of csrc/ each folder may include from, besides itself. Transitive
# directions are spelled out: runtime -> ops -> graph -> core, backends -> ops.
ALLOWED = {
    "core": set(),
    "onnx": {"core", "graph"},
    "graph": {"core", "ops"},  # passes see the IR, the shape rules and the kernel registry
    "ops": {"core", "graph"},
    "backends": {"core", "graph", "ops"},
    "runtime": {"core", "graph", "ops", "onnx"},
    "bindings": {"core", "graph", "ops", "onnx", "runtime", "backends"},
    "probe": set(),  # twinfer._spin_probe runs before the core loads: it includes none of it
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def cpp_includes():
    """(file relative to csrc, its top folder, the top folder it includes from)."""
    for path in sorted(CSRC.rglob("*")):
        if path.suffix not in (".h", ".cc", ".cu", ".cuh"):
            continue
        rel = path.relative_to(CSRC)
        for inc in INCLUDE.findall(path.read_text(errors="replace")):
            yield str(rel), rel.parts[0], inc.split("/")[0]


def test_cpp_include_directions():
    assert ALLOWED.keys() >= {p.name for p in CSRC.iterdir() if p.is_dir()}, "a csrc folder without rules"
    bad = [f"{f} includes {to}/" for f, layer, to in cpp_includes()
           if to in ALLOWED and to != layer and to not in ALLOWED[layer]]
    assert not bad, "\n".join(bad)


def python_modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package (an extension
    module counts through its .pyi stub)."""
    mods = {}
    for path in PKG.rglob("*.py*"):
        if path.suffix not in (".py", ".pyi"):
            continue
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods.setdefault(".".join(parts), path)
    return mods


def runtime_imports(tree: ast.AST):
    """Import statements outside `if TYPE_CHECKING:` blocks."""
    def walk(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for sub in child.orelse:
                    yield from walk_node(sub)
                continue
            yield from walk_node(child)

    def walk_node(node):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from walk(node)

    yield from walk(tree)


def import_graph() -> dict[str, set[str]]:
    mods = python_modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        if path.suffix == ".pyi":
            graph[name] = set()
            continue
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets = set()
        for node in runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
                continue
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            for a in node.names:
                # `from pkg import mod` imports the submodule; `from pkg import name` the package.
                targets.add(f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base)
        graph[name] = {t for t in targets if t in mods and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_python_imports_have_no_cycle():
    graph = import_graph()
    assert "twinfer.engine" in graph and "twinfer.quantize.calibration" in graph
    assert not cycles(graph), cycles(graph)


def test_quantize_does_not_import_engine():
    graph = import_graph()
    for mod in ("twinfer.quantize", "twinfer.quantize.calibration", "twinfer.quantize.analyze"):
        assert "twinfer.engine" not in graph[mod], mod


def test_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
