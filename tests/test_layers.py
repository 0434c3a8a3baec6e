"""The import structure of kvsm: no import cycles, and the layers of the architecture
(the pure model below encoding and TLC, the simulator, the GPU backend, the command
line) only import downwards. Read from the source with `ast`, every import counted,
those inside functions too (a cycle through a deferred import is still a cycle).

The rules name package prefixes, not files, so that a module that becomes a package
(or moves inside its layer) is still covered."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kvsm"

PURE = ("kvsm.state", "kvsm.records", "kvsm.victims", "kvsm.tx", "kvsm.hostalloc", "kvsm.maptx", "kvsm.writes", "kvsm.effects", "kvsm.transitions", "kvsm.invariants", "kvsm.planner")
# what a layer must not import, by the layer's package prefixes
FORBIDDEN = [
    (PURE, ("kvsm.log", "kvsm.tla", "kvsm.sim", "kvsm.gpu", "kvsm.cli", "kvsm.commands")),
    (("kvsm.sim",), ("kvsm.gpu", "kvsm.cli", "kvsm.commands")),
    # the renderer is below the corpus, which prints with it (the step syntax both use is kvsm.steptext)
    (("kvsm.render", "kvsm.steptext"), ("kvsm.corpus", "kvsm.cli", "kvsm.commands")),
    # the real-implementation adapters are a backend: nothing of kvsm but the command line
    # imports them (they import SGLang and torch when they run)
    (PURE + ("kvsm.log", "kvsm.digest", "kvsm.replay", "kvsm.checking", "kvsm.tla", "kvsm.sim", "kvsm.render", "kvsm.corpus",
             "kvsm.gpu", "kvsm.campaign", "kvsm.sweep"), ("kvsm.realimpl",)),
    (("kvsm.realimpl",), ("kvsm.cli", "kvsm.commands")),
]
ENTRY_POINT = "kvsm.cli"  # run by the `kvsm` script and `python -m kvsm.cli`, imported by no module


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The kvsm modules that module `name` imports (a name imported from a package counts
    as the submodule when there is one, else as the package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                base_name = ".".join(base + ([node.module] if node.module else []))
            else:
                base_name = node.module or ""
            for a in node.names:
                sub = f"{base_name}.{a.name}"
                out.add(sub if sub in modules else base_name)
    return {m for m in out if m == "kvsm" or m.startswith("kvsm.")}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n) :] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_the_import_graph_is_read_from_every_module(graph):
    # a sanity check of the reader: known edges of the tree are found
    assert "kvsm.sim.cluster" in graph["kvsm.sim.scheduler"]
    assert "kvsm.transitions" in graph["kvsm.sim.procedures"]
    assert "kvsm.sim.procedures" in graph["kvsm.sim.scheduler"]  # `from . import procedures as proc`
    assert len(graph) > 40


def test_no_import_cycles_among_kvsm_modules(graph):
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("layer,forbidden", FORBIDDEN, ids=["pure-model", "sim", "render", "below-realimpl", "realimpl"])
def test_a_layer_imports_nothing_from_the_layers_above_it(graph, layer, forbidden):
    bad = sorted(
        f"{m} imports {n}" for m, targets in graph.items() if _under(m, layer) for n in targets if _under(n, forbidden)
    )
    assert not bad, "; ".join(bad)


def test_nothing_imports_the_command_line_entry_point(graph):
    bad = sorted(m for m, targets in graph.items() if ENTRY_POINT in targets and m != ENTRY_POINT)
    assert not bad, f"{ENTRY_POINT} is imported by " + ", ".join(bad)


# ---- how commands are found ---------------------------------------------------------------------
# An import by name at run time (importlib, __import__, pkgutil's discovery) is an edge the
# import graph above cannot see: a cycle or a layer crossed through it would go unnoticed.
DYNAMIC_IMPORTS = {("importlib", "import_module"), ("pkgutil", "iter_modules"), ("pkgutil", "walk_packages"), (None, "__import__"), (None, "import_module")}


def _dynamic_imports(path: Path, root: Path = ROOT) -> list[str]:
    """`FILE:LINE call` (FILE relative to `root`) for each call in `path` that imports or
    discovers modules by name."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        key = (f.value.id if isinstance(f.value, ast.Name) else None, f.attr) if isinstance(f, ast.Attribute) else (None, f.id) if isinstance(f, ast.Name) else None
        if key in DYNAMIC_IMPORTS:
            out.append(f"{path.relative_to(root)}:{node.lineno} {ast.unparse(f)}")
    return out


def test_no_module_imports_kvsm_modules_by_name_at_run_time():
    bad = [hit for path in _modules().values() for hit in _dynamic_imports(path)]
    assert not bad, "imports the graph cannot see: " + "; ".join(bad)


def test_the_dynamic_import_finder_finds_discovery(tmp_path):
    p = tmp_path / "plug.py"
    p.write_text("import importlib, pkgutil\n\ndef load(path):\n    for m in pkgutil.iter_modules(path):\n        importlib.import_module(m.name)\n")
    assert _dynamic_imports(p, tmp_path) == ["plug.py:4 pkgutil.iter_modules", "plug.py:5 importlib.import_module"]


def test_the_command_line_imports_and_registers_every_command_module(graph):
    # a command module defines register(app); the others (common, serving) are its helpers
    commands = sorted(m for m in graph if m.startswith("kvsm.commands.") and "def register(" in _modules()[m].read_text())
    assert len(commands) >= 6
    missing = [m for m in commands if m not in graph[ENTRY_POINT]]
    assert not missing, f"{ENTRY_POINT} does not import " + ", ".join(missing)
    # and calls each one's register(app) by the name it imported it under
    tree = ast.parse(_modules()[ENTRY_POINT].read_text())
    alias = {f"kvsm.commands.{a.name}": a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "commands" and n.level == 1 for a in n.names}
    called = {n.func.value.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "register" and isinstance(n.func.value, ast.Name)}
    unregistered = [m for m in commands if alias.get(m) not in called]
    assert not unregistered, f"{ENTRY_POINT} imports but does not register " + ", ".join(unregistered)


def test_an_import_inside_a_function_is_an_edge_and_closes_a_cycle(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from kvsm import b\n")
    b.write_text("def late():\n    from kvsm import a  # deferred, still an edge\n    return a\n")
    modules = {"kvsm.a": a, "kvsm.b": b}
    g = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert g["kvsm.b"] == {"kvsm.a"}
    assert _cycle(g) == ["kvsm.a", "kvsm.b", "kvsm.a"]
