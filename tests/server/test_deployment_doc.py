"""docs/DEPLOYMENT.md shows the commands of examples/deploy-local/deploy.sh: every option of a
command on that page is one the script passes, and every `deploy.sh` action it names exists, so the
page cannot drift from the script that tests/server/test_deployment.py runs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "DEPLOYMENT.md"
SCRIPT = REPO / "examples" / "deploy-local" / "deploy.sh"
CEREMONY = REPO / "examples" / "key-ceremony" / "ceremony.sh"
# programs the script runs; a page line starting with another one (ledger, audit) is tested elsewhere
SCRIPTED = (
    "secure-fed certs",
    "secure-fed client",
    "flower-superlink",
    "flwr supernode",
    "flwr run",
    "flwr ls",
)


def page_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", PAGE.read_text(), flags=re.S)
    joined = [re.sub(r"\\\n\s*", " ", block) for block in blocks]
    return [line.split("  #")[0].strip() for block in joined for line in block.splitlines() if line.strip()]


def test_the_page_shows_commands_the_script_runs() -> None:
    script = SCRIPT.read_text()
    checked = 0
    for command in page_commands():
        words = shlex.split(command.replace("$((PORT + 10))", "PORT"))
        if words[0].endswith("deploy.sh") or (len(words) > 1 and words[1].endswith("deploy.sh")):
            action = words[words.index(next(w for w in words if w.endswith("deploy.sh"))) + 1]
            assert re.search(rf"^{re.escape(action)}\)", script, flags=re.M), f"deploy.sh has no {action!r}"
            checked += 1
        elif any(command.startswith(p) for p in SCRIPTED):
            options = [w.split("=")[0] for w in words if w.startswith("--")]
            missing = [o for o in options if o not in script]
            assert not missing, f"{command!r}: deploy.sh never passes {missing}"
            program = next(p for p in SCRIPTED if command.startswith(p))
            assert program in script, f"deploy.sh never runs {program!r}"
            checked += 1
        elif command.startswith("bash examples/key-ceremony/ceremony.sh"):
            assert CEREMONY.is_file() and 'key-ceremony/ceremony.sh" keys' in script
            checked += 1
    assert checked >= 8  # the page's deployment commands were found and compared
