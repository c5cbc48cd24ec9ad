"""Each folder says whose code it is, and keeps the rule its party keeps (docs/ARCHITECTURE.md
opens with this map): a module imports only what its folder's rule allows.

The parties: `site/` (a hospital's node: knows no server code), `server/` (knows no site code and no
launcher), `verifier/` (reads the signed logs' contract, secure_fed.audits, and nothing else, so
an officer's check runs no code of the parties it checks), `protocol/` (what site and server
agree on, built from the libraries alone), `launch/` (starts the parties: may import any of them),
`cli/` (parses and hands over) and `lab/` (the research harness, which nothing imports and the FAB
leaves out). The libraries under them: dp, crypto and audits know nothing of FedTAR, FM2 or Flower
messages; data knows no model; an algorithm folder registers itself with the core
(secure_fed.registry), and no core folder imports an algorithm; and no module of the package imports
itself back through others, not even from inside a function (no import cycle)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "secure_fed"

# folder (or top-level module) -> ("only", what it may import) or ("never", what it must not);
# the names are secure_fed's folders and top-level modules; a folder may always import itself
RULES: dict[str, tuple[str, frozenset[str]]] = {
    # the parties
    "site": ("never", frozenset({"server", "launch", "cli", "lab"})),
    "server": (
        "only",
        frozenset({"protocol", "audits", "config", "crypto", "dp", "eval", "registry", "facade"}),
    ),
    "verifier": ("only", frozenset({"audits", "facade"})),
    "protocol": ("only", frozenset({"config", "crypto", "dp", "facade"})),
    "launch": ("never", frozenset({"cli", "lab"})),
    "cli": ("never", frozenset({"lab"})),
    "lab": ("never", frozenset()),
    # the libraries the parties share
    "audits": ("only", frozenset({"facade"})),
    "dp": ("only", frozenset({"config", "facade"})),
    "crypto": ("only", frozenset({"config", "facade"})),
    "config": ("only", frozenset({"registry", "dp"})),  # names checked against the tables they live in
    "data": ("only", frozenset({"config", "facade"})),
    "eval": ("only", frozenset({"config", "data", "facade"})),
    "model": ("only", frozenset({"config", "data", "registry", "facade"})),
    "algorithms": ("never", frozenset({"launch", "cli", "lab", "verifier"})),
    # the package's own plumbing
    "registry": ("only", frozenset({"algorithms"})),
    "facade": ("only", frozenset()),
    "_env": ("only", frozenset()),
    "__init__": ("only", frozenset({"_env"})),
}


def _folder_of(module: str) -> str | None:
    """The folder (or top-level module) a secure_fed module belongs to; None for the package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _rule_breaks(root: Path = PACKAGE) -> list[str]:
    wrong = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        own = rel.parts[0].removesuffix(".py")
        kind, names = RULES[own]
        reached = {_folder_of(m) for m in _imported_modules(path, root)}
        # `from secure_fed import x` reaches x
        reached |= {n for m, ns in _import_statements(path, root) if m == "secure_fed" for n in ns}
        reached -= {own, None}
        bad = reached - names if kind == "only" else reached & names
        if bad:
            wrong.append(f"{rel} imports {sorted(bad)} (its rule: {kind} {sorted(names)})")
    return wrong


def test_every_folder_keeps_its_party_rule() -> None:
    assert _rule_breaks() == []


def test_every_folder_has_a_rule() -> None:
    """A new folder says whose code it is before it lands."""
    found = {
        p.name.removesuffix(".py")
        for p in PACKAGE.iterdir()
        if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    assert found - RULES.keys() == set(), "give each new folder a rule in RULES"
    assert RULES.keys() - found == set(), "a rule names a folder that is gone"


def test_the_rule_check_sees_a_violation(tmp_path: Path) -> None:
    pkg = tmp_path / "secure_fed"
    files = {
        "verifier/check.py": "def f():\n    from secure_fed.site.runtime import SiteRuntime\n",  # lazily
        "server/loop.py": "from ..site import runtime\n",  # relative
        "site/runtime.py": "from secure_fed import launch\n",  # through the package
        "protocol/wire.py": "from secure_fed.dp.events import Event\n",  # allowed
        "dp/events.py": "",
        "launch/__init__.py": "",
        "site/__init__.py": "",
    }
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    found = [line.split(" (")[0] for line in _rule_breaks(pkg)]
    assert found == [
        "server/loop.py imports ['site']",
        "site/runtime.py imports ['launch']",
        "verifier/check.py imports ['site']",
    ], found


# The federation core: it dispatches to algorithms through secure_fed.registry, never by import.
CORE = ("site", "server", "verifier", "protocol", "launch", "crypto", "dp", "audits", "data", "model")


def _module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _import_statements(path: Path, root: Path = PACKAGE) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(module, names) per import in the file, at any depth: an import inside a function or under
    `if TYPE_CHECKING:` counts (it still runs, or still ties the two modules together); relative
    imports resolved; names is () for `import m`."""
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                parts = package.split(".")
                module = ".".join([*parts[: len(parts) - node.level + 1], *filter(None, [node.module])])
            yield module, tuple(alias.name for alias in node.names)


def _imported_modules(path: Path, root: Path = PACKAGE) -> set[str]:
    """Every secure_fed module a file imports, at any depth (lazy imports in functions count)."""
    found = set()
    for module, names in _import_statements(path, root):
        if module.startswith("secure_fed"):
            # `from secure_fed.x import y` may name a module y as well as an attribute
            found |= {module, *(f"{module}.{n}" for n in names)}
    return found


def test_the_core_imports_no_algorithm() -> None:
    wrong = []
    for folder in CORE:
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            text = path.read_text()
            bad = {m for m in _imported_modules(path) if m.startswith("secure_fed.algorithms")}
            # nor by name at run time (importlib), which the import check above would not see
            if "secure_fed.algorithms" in text.replace("`secure_fed.algorithms", ""):
                bad.add("a 'secure_fed.algorithms' string")
            if bad:
                wrong.append(f"{path.relative_to(PACKAGE)} imports {sorted(bad)}")
    assert wrong == []


def test_the_registry_names_no_algorithm_folder() -> None:
    """It lists the folders at run time (its plugin discovery): naming one would import the
    algorithm, and through it the core, from the module the core looks algorithms up in."""
    path = PACKAGE / "registry.py"
    assert {m for m in _imported_modules(path) if m.startswith("secure_fed.algorithms.")} == set()
    assert "secure_fed.algorithms." not in path.read_text()


LAB = "secure_fed.lab"


def _lab_importers(root: Path = PACKAGE) -> list[str]:
    """Modules outside secure_fed/lab that import it (at any depth, relative imports resolved), or
    name it in a string (importlib): the lab is not in the FAB a site approves, so a module that
    reached it would fail there, or run code no site reviewed."""
    wrong = []
    for path in sorted(root.rglob("*.py")):
        if (root / "lab") in path.parents:
            continue
        named = {m for m in _imported_modules(path, root) if m == LAB or m.startswith(LAB + ".")}
        # `from secure_fed import lab` names it as an attribute of the package
        named |= {
            f"{m}.{n}" for m, names in _import_statements(path, root) if m == "secure_fed" for n in names
        }
        named = {m for m in named if m == LAB or m.startswith(LAB + ".")}
        if LAB in path.read_text().replace("`" + LAB, ""):
            named.add(f"a '{LAB}' string")
        if named:
            wrong.append(f"{path.relative_to(root.parent)} imports {sorted(named)}")
    return wrong


def test_nothing_outside_the_lab_imports_it() -> None:
    assert _lab_importers() == []


def test_the_lab_check_sees_an_import(tmp_path: Path) -> None:
    pkg = tmp_path / "secure_fed"
    files = {
        "lab/__init__.py": "",
        "lab/sweep.py": "from secure_fed.config import RunConfig\n",  # the lab may import the package
        "cli.py": "def sweep():\n    from secure_fed.lab.sweep import sweep\n",  # lazily: still an import
        "a/b.py": "from ..lab import cells\n",  # relative
        "c.py": "from secure_fed import lab\n",
        "d.py": "import importlib\nimportlib.import_module('secure_fed.lab.sweep')\n",
        "e.py": "X = 1  # `secure_fed.lab` named in prose only\n",
    }
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    found = _lab_importers(pkg)
    assert [line.split(" ")[0] for line in found] == [
        "secure_fed/a/b.py",
        "secure_fed/c.py",
        "secure_fed/cli.py",
        "secure_fed/d.py",
    ], found


def _module_graph(root: Path) -> dict[str, set[str]]:
    """secure_fed module → the secure_fed modules whose code its imports may run.

    `import a.b.c` or `from a.b.c import x` runs a/__init__.py, a/b/__init__.py and a/b/c.py (and
    a/b/c/x.py where x is a submodule), so each is an edge; but not the importer's own packages:
    Python starts a module's parent packages before the module, so naming them runs nothing new.
    Reading an attribute of a package (`from a import f`, even inside a/) needs its __init__ to
    have run that far, so that is an edge whoever reads it."""
    paths = {_module_name(path, root): path for path in root.rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        own = {*_ancestors(name), name}
        targets = set()
        for module, names in _import_statements(path, root):
            submodules = {f"{module}.{n}" for n in names if f"{module}.{n}" in paths}
            targets |= submodules | ({module, *_ancestors(module)} - own)
            if len(submodules) < len(names):
                targets.add(module)
        graph[name] = (targets & paths.keys()) - {name}
    return graph


def _cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path start → … → start in the import graph, or None."""
    stack = [(start, [start])]
    seen = set()
    while stack:
        node, path = stack.pop()
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component (modules that import each other, however
    indirectly), through the component's first module by name."""
    reach = {module: _reachable(graph, module) for module in graph}
    cycles = []
    done: set[str] = set()
    for module in sorted(graph):
        if module in done or module not in reach[module]:
            continue
        component = {other for other in reach[module] if module in reach[other]}
        done |= component
        cycle = _cycle_through({m: graph[m] & component for m in component}, module)
        assert cycle is not None  # every member of a component reaches every other
        cycles.append(cycle)
    return cycles


def test_the_package_imports_no_cycle() -> None:
    cycles = _import_cycles(_module_graph(PACKAGE))
    assert cycles == [], "import cycles:\n" + "\n".join(" → ".join(cycle) for cycle in cycles)


def test_the_cycle_check_sees_a_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "secure_fed"
    files = {
        # relative, inside a function, under TYPE_CHECKING, through a package's __init__: all count
        "x.py": "def f():\n    from .y import g\n",
        "y.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import secure_fed.z.w\n",
        "z/__init__.py": "from secure_fed import x\n",
        "z/w.py": "",
        # a package's __init__ importing its submodules, which import each other: no cycle
        "a/__init__.py": "from secure_fed.a.b import f\n",
        "a/b.py": "from secure_fed.a import c\n",
        "a/c.py": "X = 1\n",
        # but reading the package's own attribute depends on its __init__: a cycle
        "p/__init__.py": "from secure_fed.p.q import h\n",
        "p/q.py": "from secure_fed.p import CONSTANT\n",
        # a module named in a string is not an import
        "s.py": "X = 'secure_fed.x'\n",
    }
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    graph = _module_graph(pkg)
    assert graph["secure_fed.a.b"] == {"secure_fed.a.c"}
    assert graph["secure_fed.s"] == set()
    assert _import_cycles(graph) == [
        ["secure_fed.p", "secure_fed.p.q", "secure_fed.p"],
        ["secure_fed.x", "secure_fed.y", "secure_fed.z", "secure_fed.x"],
    ]
