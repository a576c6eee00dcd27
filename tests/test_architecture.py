"""The project's layers import downwards only, and no module imports itself back through others.

Every import statement of every product module is read, those inside functions included (an
import inside a function hides a dependency; it does not remove it). Layers, lowest first:
the tuners (``nni_opevo``: nni, numpy, scipy, never TVM), the trial runtime (``trial_code``),
the tools (``nni_opevo_tools``) and the benchmark harness (``nni_opevo_bench``). A module may
import its own layer and the ones below it; docs/architecture.md says what belongs where.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["nni_opevo", "trial_code", "nni_opevo_tools", "nni_opevo_bench"]
TUNER_DEPENDENCIES = {"nni", "numpy", "scipy", "threadpoolctl", "xgboost"}
"""What the tuners may import besides the standard library (xgboost: the AutoTVM peer's extra)."""


def modules() -> dict[str, Path]:
    out = {}
    for package in LAYERS:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every module ``name`` imports, anywhere in its file: project modules by their full name
    (``from pkg import sub`` names the submodule), others by their top-level package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                out.add(sub if sub in known else source)
    return {m if m.split(".")[0] in LAYERS else m.split(".")[0] for m in out}


GRAPH = {name: imports(name, path, modules()) for name, path in modules().items()}


def layer(module: str) -> int:
    return LAYERS.index(module.split(".")[0])


def test_every_layer_exists():
    assert all((ROOT / package / "__init__.py").exists() for package in LAYERS)


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_go_down_the_layers(module):
    upward = sorted(m for m in GRAPH[module] if m.split(".")[0] in LAYERS and layer(m) > layer(module))
    assert not upward, f"{module} imports a higher layer: {upward}"


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if layer(m) == 0))
def test_tuners_depend_on_nni_numpy_and_scipy_only(module):
    foreign = sorted(m for m in GRAPH[module] if m.split(".")[0] not in LAYERS
                     and m not in sys.stdlib_module_names and m not in TUNER_DEPENDENCIES)
    assert not foreign, f"{module} imports {foreign}"


def test_no_import_circles():
    """Tarjan's strongly connected components of the module graph: every one a single module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in GRAPH.get(node, ()):
            if nxt not in GRAPH:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    assert not circles, f"import circles: {circles}"
