"""No file of the package over 700 lines and no function over 100 (issue 66): a newcomer reads a
module as one job and a function as one step.

The files and functions still over are listed below by name. The list can only shrink: a new
file or function over the limit fails, and so does a listed one that is now under it (or gone),
so the list never names more than what is still to split. Reads files only (well under a second)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "secure_fed"
MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 100

# issue 66: not yet split. Remove an entry once its file is under the limit (the test says when).
FILES_OVER: set[str] = set()

# issue 66: not yet split, as "file::function" (a nested function as "outer.inner").
FUNCTIONS_OVER: set[str] = set()


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, int]]:
    """(qualified name, lines from `def` to its last line) of every function, nested ones too."""
    found = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = f"{prefix}{node.name}"
            if not isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                found.append((name, node.end_lineno - node.lineno + 1))
            found += _functions(node, f"{name}.")
        else:
            found += _functions(node, prefix)
    return found


def oversized(root: Path) -> tuple[set[str], set[str]]:
    """The files over MAX_FILE_LINES and the functions over MAX_FUNCTION_LINES under `root`."""
    files, functions = set(), set()
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > MAX_FILE_LINES:
            files.add(name)
        for function, lines in _functions(ast.parse(text)):
            if lines > MAX_FUNCTION_LINES:
                functions.add(f"{name}::{function}")
    return files, functions


def test_no_file_over_the_limit_but_those_listed() -> None:
    files, _ = oversized(PACKAGE)
    assert files - FILES_OVER == set(), f"over {MAX_FILE_LINES} lines: split them by job"
    assert FILES_OVER - files == set(), "now within the limit (or gone): remove them from FILES_OVER"


def test_no_function_over_the_limit_but_those_listed() -> None:
    _, functions = oversized(PACKAGE)
    assert functions - FUNCTIONS_OVER == set(), f"over {MAX_FUNCTION_LINES} lines: split them by step"
    assert FUNCTIONS_OVER - functions == set(), "within the limit now (or gone): remove from FUNCTIONS_OVER"


def test_the_check_sees_a_long_file_and_a_long_function(tmp_path: Path) -> None:
    def lines(count: int, indent: int) -> str:
        return "".join(f"{' ' * indent}x{i} = {i}\n" for i in range(count))

    # exactly at both limits: allowed
    (tmp_path / "short.py").write_text("def fits():\n" + lines(MAX_FUNCTION_LINES - 1, 4))
    (tmp_path / "sub").mkdir()
    nested = "class C:\n    def m(self):\n        def inner():\n" + lines(MAX_FUNCTION_LINES, 12)
    (tmp_path / "sub" / "long.py").write_text(nested + "        return inner\n" + lines(MAX_FILE_LINES, 0))
    (tmp_path / "fits.py").write_text(lines(MAX_FILE_LINES, 0))
    files, functions = oversized(tmp_path)
    assert files == {"sub/long.py"}
    assert functions == {"sub/long.py::C.m", "sub/long.py::C.m.inner"}
