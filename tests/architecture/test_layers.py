"""The import rule (docs/architecture.md): data flows one way, so imports do too.

ingest ← engine ← analysis ← render / check ← run ← cli, with ``errors``, ``text`` and
``colltypes`` below everything; ``nccl`` reads logs (ingest's floor), ``mfu`` and ``compat``
sit beside the engine; ``synth`` (the generator) stands alone so that its expected figures
cannot come from the code they check. Every import counts: module level, inside functions, and
under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "tracecomm"

LAYERS = {
    "tracecomm._version": 0,
    "tracecomm.errors": 0,
    "tracecomm.text": 0,
    "tracecomm.colltypes": 0,
    "tracecomm.doc": 0,
    "tracecomm.frameworks": 0,
    "tracecomm.collector": 0,
    "tracecomm.ingest": 1,
    "tracecomm.nccl": 1,
    "tracecomm.engine": 2,
    "tracecomm.mfu": 2,
    "tracecomm.compat": 2,
    "tracecomm.analysis": 3,
    "tracecomm.schema": 3,  # the published schemas, generated from analysis.report
    "tracecomm.render": 4,
    "tracecomm.check": 4,
    "tracecomm.run": 5,
    "tracecomm.cli": 6,
    # tracecomm.profile: writes what the run reads (its settings file), in a training process
    "tracecomm.record": 6,
    # the package itself (``tracecomm.analyze``, ``__version__``) and ``python -m tracecomm``
    "tracecomm": 7,
    "tracecomm.__main__": 7,
}
# the generator imports only itself (and the floor): never what it is there to check
ALONE = {"tracecomm.synth"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str) -> set[str]:
    """The tracecomm modules ``name`` imports (a ``from pkg import sub`` names the submodule)."""
    tree = ast.parse(MODULES[name].read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return {m for m in found if m == "tracecomm" or m.startswith("tracecomm.")}


def layer_of(name: str) -> tuple[str, int | None]:
    """The layer (or the standalone package) a module belongs to: its longest listed prefix."""
    for prefix in sorted([*LAYERS, *ALONE], key=len, reverse=True):
        if name == prefix or name.startswith(prefix + "."):
            return prefix, LAYERS.get(prefix)
    raise AssertionError(f"{name}: in no layer; add its package to LAYERS")


def test_every_module_is_in_a_layer() -> None:
    for name in MODULES:
        layer_of(name)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_imports_from_a_layer_above_its_own(name: str) -> None:
    own, level = layer_of(name)
    for target in sorted(imports(name)):
        theirs, their_level = layer_of(target)
        if own in ALONE or theirs in ALONE:
            assert theirs == own or their_level == 0, f"{name} imports {target}"
        else:
            assert level is not None and their_level is not None
            assert their_level <= level, f"{name} (layer {level}) imports {target} ({their_level})"


def test_no_import_circle() -> None:
    graph = {name: imports(name) & set(MODULES) for name in MODULES}
    # a package's __init__ may re-export its own modules lazily; that is not a circle
    for name, targets in graph.items():
        graph[name] = {t for t in targets if not (name.startswith(t + ".") and t != "tracecomm")}
    circles = []
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    circles = [c for c in circles if tuple(c) not in KNOWN_CIRCLES]
    assert not circles, "\n".join(" -> ".join(c) for c in circles)


# Nothing may join this list: a circle is two modules that are one.
KNOWN_CIRCLES: set[tuple[str, ...]] = set()
