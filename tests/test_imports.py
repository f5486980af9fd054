"""No import circles in clphys: no module imports another that imports it back
(directly or through others, at the top or inside a function; imports for the
type checker alone, under ``if TYPE_CHECKING:``, run nothing and do not count),
and every module imports in a fresh interpreter whatever was imported before it."""

import ast
import random
import subprocess
import sys
from pathlib import Path

import pytest

import clphys

PACKAGE = Path(clphys.__file__).resolve().parent
# running it is the `python -m clphys` command, not an import
NOT_IMPORTED = {"clphys.__main__"}


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, whether it is a package's __init__)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["clphys", *path.relative_to(PACKAGE).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def _imports(name: str, path: Path, is_package: bool, modules) -> set[str]:
    """The clphys modules `name` imports anywhere in its file. Importing a.b.c runs
    a and a.b first, but a module's own parent packages are no dependency of it,
    unless it takes names from one (``from .. import __version__``)."""
    here = name.split(".") if is_package else name.split(".")[:-1]
    found = set()
    tree = ast.parse(path.read_text())
    for block in ast.walk(tree):       # imports for the type checker only run no code
        if isinstance(block, ast.If) and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            block.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
            targets = subs + ([base] if len(subs) < len(node.names) else [])
        else:
            continue
        for target in targets:
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                dep = ".".join(parts[:i])
                own_parent = name.startswith(dep + ".") and dep != target
                if dep in modules and dep != name and not own_parent:
                    found.add(dep)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle():
    modules = _modules()
    graph = {name: _imports(name, path, pkg, modules) for name, (path, pkg) in modules.items()}
    assert "clphys.errors" in graph["clphys.runtime.render"]           # the walk sees imports
    circles = _cycles(graph)
    assert not circles, "modules that import each other: " + "; ".join(
        " <-> ".join(c) + " (" + ", ".join(f"{a} imports {sorted(graph[a] & set(c))}" for a in c) + ")"
        for c in circles)


def test_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


_IMPORT_ALL = """
import importlib, random, sys
names = sys.argv[2:]
random.Random(int(sys.argv[1])).shuffle(names)
for name in names:                       # each module first, then all in a random order
    for loaded in [m for m in sys.modules if m == "clphys" or m.startswith("clphys.")]:
        del sys.modules[loaded]
    importlib.import_module(name)
for name in names:
    importlib.import_module(name)
print(len(names))
"""


@pytest.mark.slow            # ~70 fresh imports of the package: ~20 s on two busy cores
def test_every_module_imports_first_and_in_any_order():
    names = sorted(set(_modules()) - NOT_IMPORTED)
    seed = random.Random(25).randrange(2**31)      # fixed: a failure names its order
    done = subprocess.run([sys.executable, "-c", _IMPORT_ALL, str(seed), *names],
                          capture_output=True, text=True, timeout=300, cwd=PACKAGE.parent)
    assert done.returncode == 0, f"import order with seed {seed} failed:\n{done.stderr[-3000:]}"
    assert done.stdout.split() == [str(len(names))]
