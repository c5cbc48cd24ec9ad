"""README.md's links reach what they name: a file of the repository and, for `file.md#anchor`, a
heading of that file (GitHub's anchor for it). Reads files only (well under a second)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\((?!https?://)(?P<path>[^)#\s]+)(?:#(?P<anchor>[^)\s]+))?\)")


def github_anchor(heading: str) -> str:
    """GitHub's id for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.DOTALL)
    return {github_anchor(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)}


def test_github_anchor_matches_known_ids():
    assert github_anchor("FedTAR vs FedAvg") == "fedtar-vs-fedavg"
    assert github_anchor("Privacy–utility (ε sweep)") == "privacyutility-ε-sweep"
    heading = "Upload bytes — `benchmarks/upload_bytes.py`"
    assert github_anchor(heading) == "upload-bytes--benchmarksupload_bytespy"


def test_readme_links_reach_their_file_and_heading():
    links = list(LINK.finditer((ROOT / "README.md").read_text(encoding="utf-8")))
    assert any(m["anchor"] for m in links)  # the results at a glance link into RESULTS and BENCHMARKS
    for m in links:
        target = ROOT / m["path"]
        assert target.exists(), f"README.md links to {m['path']}, which does not exist"
        if m["anchor"]:
            assert m["anchor"] in anchors(target), f"README.md: {m[0]}: no such heading in {m['path']}"


def test_a_renamed_heading_breaks_the_link(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("# Title\n\n## FedTAR vs FedAvg\n\n```\n## not a heading\n```\n", encoding="utf-8")
    assert "fedtar-vs-fedavg" in anchors(doc) and "not-a-heading" not in anchors(doc)
    doc.write_text("# Title\n\n## FedTAR against FedAvg\n", encoding="utf-8")
    assert "fedtar-vs-fedavg" not in anchors(doc)


def _paragraph(text: str, start: str) -> str:
    return next(p for p in text.split("\n\n") if p.startswith(start))


def test_readme_says_how_to_activate_the_venv_make_creates():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    venv = re.search(r"^VENV \?= (\S+)$", (ROOT / "Makefile").read_text(), flags=re.MULTILINE)
    assert venv is not None
    line = _paragraph(text, "The `secure-fed` command lives in")
    assert f"`. {venv[1]}/bin/activate`" in line and f"`{venv[1]}/bin/secure-fed`" in line
    assert text.index(line) < text.index("## Command line")  # before the first command that needs it


def test_readme_says_what_to_do_when_memory_runs_out():
    from secure_fed.config import RunConfig

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    line = " ".join(_paragraph(text, "Out of memory:").split())
    assert "threads" in RunConfig.model_fields["train"].annotation.model_fields  # the key it names exists
    for said in (
        "`[train] threads`",
        "`secure-fed run --resume DIR`",
        "`DIR/flower/simulation.log`",
        "exits 1",
    ):
        assert said in line, said


def test_the_readmes_superlink_port_is_the_one_a_superlink_serves():
    """Flower 1.42's SuperLink serves nodes and `flwr` on one port, its --port (8000 unless set):
    a README command dialling another port reaches nothing."""
    from secure_fed.cli import client

    default = inspect.signature(client).parameters["superlink"].default
    port = default.rsplit(":", 1)[1]
    dialled = re.findall(r"--superlink \S+?:(\d+)", (ROOT / "README.md").read_text(encoding="utf-8"))
    assert dialled and set(dialled) == {port}, dialled
    assert f"PORT=${{PORT:-{port}}}" in (ROOT / "docs" / "DEPLOYMENT.md").read_text(encoding="utf-8")


def test_the_folders_the_docs_write_in_the_checkout_are_ignored_by_git():
    """README's commands write keys/, runs/ and data/ and DEPLOYMENT's walk-through deploy-work/ in
    the repository's root: private keys and patients' runs must never be one `git add .` away."""
    ignored = {line.strip().strip("/") for line in (ROOT / ".gitignore").read_text().splitlines()}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    written = {path.split("/")[0] for path in re.findall(r"(?:--out|-o) (\S+)", readme)}
    written |= {"deploy-work"}  # DEPLOYMENT.md's $WORK under the root
    folders = {name for name in written if "." not in name}
    assert {"keys", "runs", "data", "deploy-work"} <= folders, folders
    assert folders <= ignored, sorted(folders - ignored)
