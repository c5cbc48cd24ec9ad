"""The folders follow the data's path: a module imports only from its own layer or an earlier one.

dp, crypto and audits know nothing of FedTAR, FM2 or Flower messages; data knows no model; the
server knows no client code; an algorithm folder registers itself with the core, never the reverse
outside the core's dispatch points."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "secure_fed"

# folder → the secure_fed folders (and top-level modules) it must not import, even lazily
FORBIDDEN = {
    "dp": {"clients", "server", "model", "data", "algorithms", "crypto", "audits", "runner", "wire"},
    "crypto": {"clients", "server", "model", "data", "algorithms", "dp", "audits", "runner", "wire"},
    "audits": {"clients", "server", "model", "data", "algorithms", "crypto", "runner", "wire"},
    "data": {"clients", "server", "model", "algorithms", "runner"},
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
