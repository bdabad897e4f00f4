"""The package's layers, as CONTRIBUTING.md draws them: a module imports only from its own layer or below (lazy
imports inside functions included), the subpackages import each other without cycles, the library never imports the
scripts (steps/, local/, bench/, tests/), and no step imports another step."""

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
    ["asrlib.kaldi_io", "asrlib.score"],
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


def test_no_step_imports_another_step():
    bad = [
        f"{p.name}:{line} imports {mod}"
        for p in (ROOT / "steps").glob("*.py")
        for mod, line in imports(p)
        if mod.split(".")[0] == "steps"
    ]
    assert bad == []
