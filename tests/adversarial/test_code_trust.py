"""Code trust: the server distributes the code in Flower's deployment; a site runs only its own.

The attack through the real SuperLink/SuperNode path is in tests/server/test_deployment.py
(`test_flwr_run_on_a_local_deployment`: a FAB whose ClientApp is the coordinator's own gets only a
content-free refusal and leaves no marker; the approved one runs). Here, fast, the parts that
decide it: the PATH `secure-fed client` gives the SuperNode, the launcher's import isolation, the
approval list, and the signed `code` / `code_refused` records.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from secure_fed.cli import app
from secure_fed.launch import approved_app

runner = CliRunner()
SHADOW = """from pathlib import Path
Path({marker!r}).write_text("a FAB's secure_fed was imported")
"""


def make_fab(path: Path, client_app: bytes) -> Path:
    """A FAB-shaped zip: the site's package with secure_fed/launch/client_app.py replaced."""
    with zipfile.ZipFile(path, "w") as fab:
        fab.writestr("pyproject.toml", "[project]\nname = 'secure-fed'\n")
        for name, data in approved_app.package_files().items():
            fab.writestr(name, client_app if name == "secure_fed/launch/client_app.py" else data)
    return path


@pytest.fixture
def site(tmp_path: Path) -> dict[str, Path]:
    keys = tmp_path / "keys"
    made = runner.invoke(app, ["keys", "init", "--out", str(keys), "--sites", "1"])
    assert made.exit_code == 0, made.output
    policy = tmp_path / "site0.toml"
    policy.write_text(
        f'out = "{tmp_path / "out"}"\n[audit]\nkeys_dir = "{keys}"\n'
        f'[deploy]\napproved_fabs = "{tmp_path / "approved.json"}"\n'
    )
    own = (approved_app.package_root() / "launch" / "client_app.py").read_bytes()
    return {
        "keys": keys,
        "policy": policy,
        "approvals": tmp_path / "approved.json",
        "good": make_fab(tmp_path / "good.fab", own),
        "evil": make_fab(tmp_path / "evil.fab", b"import os\nos.system('ls keys')\n"),
    }


def test_the_node_resolves_flwr_clientapp_to_the_sites_runner(site: dict[str, Path], tmp_path: Path) -> None:
    """Flower's SuperExec starts `flwr-clientapp` by name from PATH: the PATH `secure-fed client`
    gives the SuperNode must resolve it to the launcher, not to Flower's installer of FABs."""
    base = ["client", "--site", "site0", "--config", str(site["policy"]), "--keys", str(site["keys"])]
    refused = runner.invoke(app, [*base, "--insecure", "--dry-run"])
    assert refused.exit_code == 2 and "approved no FAB" in refused.output, refused.output  # nothing pinned
    assert "secure-fed code approve" in refused.output and "Traceback" not in refused.output
    approved = runner.invoke(app, ["code", "approve", str(site["good"]), "--config", str(site["policy"])])
    assert approved.exit_code == 0, approved.output
    shown = runner.invoke(app, [*base, "--insecure", "--dry-run"])
    assert shown.exit_code == 0, shown.output
    command = shlex.split(shown.output.strip().splitlines()[-1])
    assert command[0] == "env"
    variables = dict(word.split("=", 1) for word in command[1:] if "=" in word and not word.startswith("-"))
    path = variables["PATH"]
    found = shutil.which("flwr-clientapp", path=path)
    assert found is not None and Path(found).parent == tmp_path / "out" / "node-bin"
    assert "secure_fed.launch.approved_app" in Path(found).read_text()
    assert "flower-superexec" not in os.listdir(Path(found).parent)  # SuperExec stays Flower's own
    node_config = command[command.index("--node-config") + 1]
    assert f"approved-fabs='{site['approvals']}'" in node_config


@pytest.mark.slow
def test_the_launcher_imports_nothing_from_the_working_folder_or_pythonpath(tmp_path: Path) -> None:
    """A `secure_fed` package in the process's folder or on PYTHONPATH (where a FAB could be
    unpacked) never shadows the site's installed one."""
    launcher = approved_app.write_launcher(tmp_path / "bin")
    shadow, marker = tmp_path / "shadow", tmp_path / "marker"
    (shadow / "secure_fed").mkdir(parents=True)
    (shadow / "secure_fed" / "__init__.py").write_text(SHADOW.format(marker=str(marker)))
    env = {**os.environ, "PYTHONPATH": str(shadow)}
    ran = subprocess.run(
        [str(launcher), "--help"], cwd=shadow, env=env, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    assert "--runtime-api-address" in ran.stdout  # flwr-clientapp's own arguments
    assert not marker.exists()
    # the same command without the launcher's isolation imports the shadow: the check can fail
    plain = [sys.executable, "-m", "secure_fed.launch.approved_app", "--help"]
    subprocess.run(plain, cwd=shadow, env=env, capture_output=True, timeout=120)
    assert marker.exists()


def test_only_a_pinned_fab_hash_runs(site: dict[str, Path]) -> None:
    node = {"site": "site0", "config-file": str(site["policy"]), "approved-fabs": str(site["approvals"])}
    good = hashlib.sha256(site["good"].read_bytes()).hexdigest()
    evil = hashlib.sha256(site["evil"].read_bytes()).hexdigest()
    assert "not approved" in (approved_app.refusal(node, good) or "")  # nothing approved yet
    review = runner.invoke(app, ["code", "review", str(site["evil"]), "--config", str(site["policy"])])
    assert review.exit_code == 0, review.output
    assert "differs                    secure_fed/launch/client_app.py" in review.output
    assert f"FAB sha256 {evil} (not approved)" in review.output
    approve = ["code", "approve", str(site["good"]), "--config", str(site["policy"]), "--note", "v1"]
    assert runner.invoke(app, approve).exit_code == 0
    assert approved_app.refusal(node, good) is None
    why = approved_app.refusal(node, evil)
    assert why is not None and evil in why and "secure-fed code approve" in why
    entry = json.loads(site["approvals"].read_text())["approved"][0]
    assert entry["sha256"] == good and entry["note"] == "v1" and entry["approved_by"]
    # the server's word for the hash is never asked: a FAB differing in one byte is another FAB
    assert approved_app.refusal(node, hashlib.sha256(site["good"].read_bytes() + b"\0").hexdigest())
    # a node whose approval list was edited into nonsense refuses, with one line naming the file
    site["approvals"].write_text('{"approved": [{"sha256": "not-a-hash"}]}')
    assert str(site["approvals"]) in (approved_app.refusal(node, good) or "")
    assert approved_app.refusal({"site": "site0"}, good) is not None  # not started by secure-fed client


def test_the_code_each_run_ran_is_signed_in_the_sites_log(site: dict[str, Path], tmp_path: Path) -> None:
    node = {"site": "site0", "config-file": str(site["policy"]), "keys-dir": str(site["keys"])}
    code = {"fab_sha256": "a" * 64, "package_digest": approved_app.package_digest(), "version": "0.1.0"}
    for _ in range(3):  # three messages of one run, each its own process: one record
        approved_app.log_code(node, "run1", "code", code, close=False)
    refused = {"fab_sha256": "b" * 64, "fab_id": "secure-fed/secure-fed"}
    for _ in range(2):
        approved_app.log_code(node, "run2", "code_refused", refused, close=True)
    first = [json.loads(x) for x in (tmp_path / "out/runs/run1/audit/site0.jsonl").read_text().splitlines()]
    assert [r["event"] for r in first] == ["code"] and first[0]["payload"] == {"site": "site0", **code}
    second = tmp_path / "out/runs/run2/audit/site0.jsonl"
    assert [json.loads(x)["event"] for x in second.read_text().splitlines()] == ["code_refused", "head"]
    verify = runner.invoke(app, ["audit", "verify", str(second), "--keys", str(site["keys"])])
    assert verify.exit_code == 0, verify.output
    # the compliance report shows the code each site ran (and the FAB it refused)
    from secure_fed.verifier.report import render_html
    from secure_fed.verifier.report_data import collect

    page = render_html(collect([tmp_path / "out/runs/run1/audit/site0.jsonl", second], None))
    # collected without verification: the section is marked unverified, and still shows what was logged
    table = page[page.index("<h2>Code each site ran (unverified)</h2>") :]
    assert code["package_digest"] in table and "a" * 64 in table and "b" * 64 in table
    assert "refused" in table
