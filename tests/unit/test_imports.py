"""The package has no import cycle, counting imports inside functions too (a cycle hidden in a
function still couples the two modules both ways): neither between modules nor between
subpackages (agent, controllers, emulate, metrics, replay, traces; a top-level module counts as
its own node), so that each subpackage depends on the others in one direction only."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "dynamix_hvd"


def module_graph(root: Path = PKG) -> dict[str, set[str]]:
    mods: dict[str, Path] = {}
    for p in root.rglob("*.py"):
        parts = p.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = p
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in mods]
                targets = subs or [node.module]   # `from pkg import submodule` imports the submodule
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[m].update(t for t in targets if t in mods and t != m)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_planted_cycle(tmp_path):
    pkg = tmp_path / "dynamix_hvd"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from dynamix_hvd.sub import b\n")
    (pkg / "sub" / "b.py").write_text("import dynamix_hvd.a\n")
    (pkg / "c.py").write_text("from dynamix_hvd import a\n")
    assert cycles(module_graph(pkg)) == [["dynamix_hvd.a", "dynamix_hvd.sub.b"]]


def test_no_import_cycle_between_modules():
    assert cycles(module_graph()) == []


def package_graph(graph: dict[str, set[str]], root: Path = PKG) -> dict[str, set[str]]:
    """The module graph contracted to subpackages: ``dynamix_hvd.X.*`` -> ``dynamix_hvd.X`` for every
    subpackage X directly below the root; top-level modules stay their own nodes."""
    subs = {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}

    def node(m: str) -> str:
        parts = m.split(".")
        return ".".join(parts[:2]) if len(parts) >= 2 and parts[1] in subs else m

    out: dict[str, set[str]] = {}
    for m, targets in graph.items():
        out.setdefault(node(m), set()).update(node(t) for t in targets if node(t) != node(m))
    for targets in list(out.values()):
        for t in targets:
            out.setdefault(t, set())
    return out


def edges_between(graph: dict[str, set[str]], src_pkg: str, dst_pkg: str) -> set[tuple[str, str]]:
    return {(m, t) for m, ts in graph.items() if m.startswith(src_pkg + ".") for t in ts
            if t == dst_pkg or t.startswith(dst_pkg + ".")}


def test_the_package_cycle_finder_finds_a_planted_cycle(tmp_path):
    pkg = tmp_path / "dynamix_hvd"
    for sub in ("a", "b", "c"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("from dynamix_hvd.b import y\n")      # a -> b
    (pkg / "b" / "y.py").write_text("def f():\n    import dynamix_hvd.a.z\n")   # b -> a, hidden in a function
    (pkg / "a" / "z.py").write_text("")
    (pkg / "c" / "w.py").write_text("from dynamix_hvd.a import x\n")      # c -> a only
    g = module_graph(pkg)
    assert cycles(g) == []                                               # no cycle between modules ...
    assert cycles(package_graph(g, pkg)) == [["dynamix_hvd.a", "dynamix_hvd.b"]]   # ... but between packages


def test_no_import_cycle_between_subpackages():
    assert cycles(package_graph(module_graph())) == []


def test_agent_uses_controllers_never_the_other_way():
    """agent/ (simulator, training, evaluation) drives controllers; the PPO controller's runtime
    (network, policy files, action mapping) lives in controllers/policy/."""
    g = module_graph()
    assert edges_between(g, "dynamix_hvd.agent", "dynamix_hvd.controllers")      # (the direction in use)
    assert edges_between(g, "dynamix_hvd.controllers", "dynamix_hvd.agent") == set()
