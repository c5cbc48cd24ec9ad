"""The folders follow the data's path: a module imports only from its own layer or an earlier one.

dp, crypto and audits know nothing of FedTAR, FM2 or Flower messages; data knows no model; the
server knows no client code; an algorithm folder registers itself with the core
(secure_fed.registry), and no core folder imports an algorithm; runner, clients/app and server/app
import no cycle."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "secure_fed"

# folder → the secure_fed folders (and top-level modules) it must not import, even lazily
FORBIDDEN = {
    "dp": {
        "clients",
        "server",
        "model",
        "data",
        "algorithms",
        "crypto",
        "audits",
        "runner",
        "wire",
        "registry",
    },
    "crypto": {
        "clients",
        "server",
        "model",
        "data",
        "algorithms",
        "dp",
        "audits",
        "runner",
        "wire",
        "registry",
    },
    "audits": {"clients", "server", "model", "data", "algorithms", "crypto", "runner", "wire", "registry"},
    "data": {"clients", "server", "model", "algorithms", "runner", "registry"},
    "model": {"clients", "server", "algorithms", "runner"},
    "server": {"clients"},
}


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("secure_fed."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("secure_fed.")}
    return found


def test_no_folder_imports_against_the_data_path() -> None:
    wrong = []
    for folder, forbidden in FORBIDDEN.items():
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            bad = _imports(path) & forbidden
            if bad:
                wrong.append(f"{path.relative_to(PACKAGE)} imports {sorted(bad)}")
    assert wrong == []


def test_the_check_sees_a_violation(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from secure_fed.clients.site import load_site\n")
    assert _imports(probe) == {"clients"}


# The federation core: it dispatches to algorithms through secure_fed.registry, never by import.
CORE = ("clients", "server", "crypto", "dp", "audits", "data", "model")


def _imported_modules(path: Path) -> set[str]:
    """Every secure_fed module a file imports, at any depth (lazy imports in functions count)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("secure_fed"):
            found.add(node.module)
            # `from secure_fed.x import y` may name a module y as well as an attribute
            found |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("secure_fed")}
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


def _module_graph(root: Path) -> dict[str, set[str]]:
    """secure_fed module name → the secure_fed modules it imports (those that exist as files)."""
    modules = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return {name: _imported_modules(path) & modules.keys() for name, path in modules.items()}


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


ENTRY_MODULES = (
    "secure_fed.runner",
    "secure_fed.clients.app",
    "secure_fed.server.app",
    "secure_fed.flower_apps",
    "secure_fed.superlink",
)


def test_no_import_cycle_through_the_runner_or_the_flower_apps() -> None:
    graph = _module_graph(PACKAGE)
    cycles = [c for c in (_cycle_through(graph, m) for m in ENTRY_MODULES) if c is not None]
    assert cycles == []


def test_the_cycle_check_sees_a_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "secure_fed"
    (pkg / "clients").mkdir(parents=True)
    (pkg / "runner.py").write_text("def f():\n    from secure_fed.clients.app import g\n")
    (pkg / "clients" / "app.py").write_text("from secure_fed import runner\n")
    (pkg / "algorithms_probe.py").write_text("X = 'secure_fed.algorithms'\n")
    graph = _module_graph(pkg)
    assert _cycle_through(graph, "secure_fed.runner") == [
        "secure_fed.runner",
        "secure_fed.clients.app",
        "secure_fed.runner",
    ]
    assert _cycle_through(graph, "secure_fed.algorithms_probe") is None
