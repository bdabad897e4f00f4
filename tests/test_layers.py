"""The package's layers, as CONTRIBUTING.md draws them: a module imports only from its own layer or below (lazy
imports inside functions included), the subpackages import each other without cycles, no module of the package is
on an import cycle (lazy imports included), the library never imports the scripts (steps/, local/, bench/, tests/),
and no step imports another step."""

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# lowest first; a subpackage (asrlib.X) or top-level module of asrlib → its layer
LAYERS = [
    [
        "asrlib",
        "asrlib.errors",
        "asrlib.io",
        "asrlib.config",
        "asrlib.config_reference",
        "asrlib.cli",
        "asrlib.kaldi_imports",
    ],
    ["asrlib.kaldi_io", "asrlib.score", "asrlib.results"],
    ["asrlib.features", "asrlib.data", "asrlib.lang"],
    ["asrlib.models"],
    ["asrlib.decode", "asrlib.gmm", "asrlib.train"],
    ["asrlib.parallel"],
    ["asrlib.export"],
    ["asrlib.app", "asrlib.pipeline"],
]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def unit(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "asrlib" and len(parts) > 1 else parts[0]


def imports(path: Path):
    """Every module ``path`` imports (anywhere in the file), with the line."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "asrlib":  # a submodule, or a name of asrlib/__init__.py (__version__)
                for a in node.names:
                    sub = ROOT / "asrlib" / a.name
                    yield (
                        f"asrlib.{a.name}" if sub.is_dir() or sub.with_suffix(".py").is_file() else "asrlib",
                        node.lineno,
                    )
            else:
                yield node.module, node.lineno
        elif isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names)


def module_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def test_every_asrlib_unit_has_a_layer():
    units = {unit(module_of(p)) for p in (ROOT / "asrlib").rglob("*.py")}
    assert units <= set(RANK), sorted(units - set(RANK))


def test_imports_go_down_the_layers_only():
    bad = []
    for p in (ROOT / "asrlib").rglob("*.py"):
        me = unit(module_of(p))
        for mod, line in imports(p):
            top = mod.split(".")[0]
            if top in ("steps", "local", "bench", "tests", "helpers", "tone_model"):
                bad.append(f"{p.relative_to(ROOT)}:{line} imports the script {mod}")
            elif top == "asrlib" and mod != "asrlib" and RANK[unit(mod)] > RANK[me]:
                bad.append(
                    f"{p.relative_to(ROOT)}:{line} ({me}, layer {RANK[me]}) imports {mod} (layer {RANK[unit(mod)]})"
                )
    assert bad == []


def test_subpackages_import_each_other_without_cycles():
    edges = defaultdict(set)
    for p in (ROOT / "asrlib").rglob("*.py"):
        me = unit(module_of(p))
        for mod, _ in imports(p):
            if mod.startswith("asrlib.") and unit(mod) != me:
                edges[me].add(unit(mod))
    state = {}

    def visit(u, path):
        if state.get(u) == "open":
            raise AssertionError("import cycle: " + " -> ".join(path + [u]))
        if state.get(u) == "done":
            return
        state[u] = "open"
        for v in edges[u]:
            visit(v, path + [u])
        state[u] = "done"

    for u in list(edges):
        visit(u, [])


def module_graph(root: Path, package: str) -> dict:
    """``package``'s modules (the ``.py`` files under ``root / package``) → the modules of the package each one
    imports, anywhere in the file (inside functions too), relative imports resolved; ``from X import y`` counts as
    an import of ``X.y`` when that is a module, else of ``X``."""
    files = {
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
        for p in (root / package).rglob("*.py")
    }
    graph = {m: set() for m in files}
    for me, path in files.items():
        here = me if path.name == "__init__.py" else me.rpartition(".")[0]  # the package relative imports start at
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in files:  # `import asrlib.lang.ngram.x`-like names: the deepest module
                    t = t.rpartition(".")[0]
                if t and t != me:
                    graph[me].add(t)
    return graph


def import_cycles(graph: dict) -> list:
    """Every import cycle of ``graph`` (one per strongly connected component of more than one module), as the
    modules in import order, the first repeated at the end."""
    index, low, stack, on_stack, comps = {}, {}, [], set(), []

    def strongconnect(v):  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    cycles = []
    for comp in comps:  # a shortest way back to the component's first module, through the component
        start = min(comp)
        paths, todo = {start: [start]}, [start]
        while todo and start not in graph[todo[0]]:
            v = todo.pop(0)
            for w in sorted(graph[v] & comp):
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    todo.append(w)
        cycles.append(paths[todo[0]] + [start])
    return cycles


def test_no_module_is_on_an_import_cycle():
    cycles = import_cycles(module_graph(ROOT, "asrlib"))
    assert cycles == [], "import cycles (lazy imports included): " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_cycle_check_sees_a_lazy_cycle(tmp_path):
    # the check above can fail: a cycle closed by an import inside a function, a relative import and a
    # `from package import module` are all found
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from .c import f\n")
    (pkg / "sub" / "c.py").write_text("def f():\n    from pkg.a import g\n    return g\n")
    (pkg / "d.py").write_text("import pkg.a\n")  # on no cycle
    graph = module_graph(tmp_path, "pkg")
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.sub.c"}
    assert import_cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.sub.c", "pkg.a"]]
    (pkg / "sub" / "c.py").write_text("def f():\n    return 1\n")
    assert import_cycles(module_graph(tmp_path, "pkg")) == []


def test_no_step_imports_another_step():
    bad = [
        f"{p.name}:{line} imports {mod}"
        for p in (ROOT / "steps").glob("*.py")
        for mod, line in imports(p)
        if mod.split(".")[0] == "steps"
    ]
    assert bad == []
