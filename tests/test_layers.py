"""The package's layers point one way (docs/architecture.md):

    runtime  <-  core  <-  tasks / data  <-  config  <-  export / online / training_run  <-  targets  <-  bench  <-  cli

A module imports only from its own layer or lower ones (imports inside functions count too), there is no
import cycle, and grpo_edge/runtime (shipped to devices as-is) imports nothing of grpo_edge. The root
package is the public facade: its names (GRPOTrainer, load_config, ...) load lazily on first use, so its
own imports are not layered, and importing it (for __version__) is allowed anywhere."""
import ast
from pathlib import Path

import grpo_edge

PKG = Path(grpo_edge.__file__).resolve().parent
# layer of each top-level module or sub-package of grpo_edge
LAYER = {"runtime": 0, "errors": 0, "sandbox": 0, "report": 0, "progress": 0, "profiles": 0, "calibration": 0,
         "core": 1, "tasks": 2, "data": 2, "config": 3,
         "export": 4, "online": 4, "training_run": 4, "resume": 4, "sizes": 4,
         "plots": 4, "utils": 4, "targets": 5, "bench": 6, "cli": 7}


def _modules():
    mods = {}
    for p in PKG.rglob("*.py"):
        parts = ("grpo_edge",) + p.relative_to(PKG).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = p
    return mods


def _edges(mods):
    """{module: set of grpo_edge modules it imports}; `from pkg import sub` counts as importing pkg.sub."""
    edges = {}
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
        out = set()
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name in mods)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                    b = ".".join(base) + ("." + node.module if node.module else "")
                else:
                    b = node.module or ""
                subs = [b + "." + a.name for a in node.names if b + "." + a.name in mods]
                out.update(subs)
                if len(subs) < len(node.names) and b in mods:
                    out.add(b)
        out.discard(m)
        edges[m] = out if m != "grpo_edge" else set()
    return edges


def _layer(m):
    parts = m.split(".")
    assert len(parts) == 1 or parts[1] in LAYER, "add %s to LAYER in tests/test_layers.py" % parts[1]
    return LAYER[parts[1]] if len(parts) > 1 else 0


def test_imports_point_down():
    edges = _edges(_modules())
    up = ["%s -> %s" % (m, t) for m in sorted(edges) for t in sorted(edges[m]) if _layer(t) > _layer(m)]
    assert not up, "imports from a higher layer:\n" + "\n".join(up)


def test_no_import_cycle():
    edges = _edges(_modules())
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
                cycles.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not cycles, "import cycles: %s" % cycles


def test_runtime_imports_nothing_of_grpo_edge():
    edges = _edges(_modules())
    bad = ["%s -> %s" % (m, t) for m in edges if m.startswith("grpo_edge.runtime.")
           for t in edges[m] if not t.startswith("grpo_edge.runtime")]
    assert not bad, bad


def test_checker_sees_cycles_and_upward_imports(tmp_path):
    """The checker itself: a two-module cycle and an upward import are found."""
    global PKG
    saved = PKG
    try:
        PKG = tmp_path / "grpo_edge"
        (PKG / "core").mkdir(parents=True)
        (PKG / "__init__.py").write_text("")
        (PKG / "core" / "__init__.py").write_text("")
        (PKG / "core" / "a.py").write_text("from grpo_edge.core import b\nfrom grpo_edge.cli import main\n")
        (PKG / "core" / "b.py").write_text("def f():\n    from grpo_edge.core.a import x\n")
        (PKG / "cli").mkdir()
        (PKG / "cli" / "__init__.py").write_text("")
        (PKG / "cli" / "main.py").write_text("")
        edges = _edges(_modules())
        assert edges["grpo_edge.core.a"] == {"grpo_edge.core.b", "grpo_edge.cli.main"}
        assert edges["grpo_edge.core.b"] == {"grpo_edge.core.a"}
        try:
            test_no_import_cycle()
        except AssertionError as e:
            assert "grpo_edge.core.a" in str(e)
        else:
            raise AssertionError("cycle not found")
        try:
            test_imports_point_down()
        except AssertionError as e:
            assert "grpo_edge.core.a -> grpo_edge.cli.main" in str(e)
        else:
            raise AssertionError("upward import not found")
    finally:
        PKG = saved
