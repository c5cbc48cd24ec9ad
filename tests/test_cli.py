"""The CLI is thin but its exit codes and messages are what operators see."""

from __future__ import annotations

import json
import shlex

from typer.testing import CliRunner

from secure_fed.cli import app

runner = CliRunner()


def test_every_command_has_help_with_an_example():
    for args in (
        ["run"],
        ["data", "synth"],
        ["data", "check"],
        ["keys", "init"],
        ["audit", "verify"],
        ["audit", "report"],
    ):
        result = runner.invoke(app, [*args, "--help"])
        assert result.exit_code == 0, args
        assert "Example" in result.output, args


def test_data_synth_then_check_ok_and_bad(tmp_path):
    out = tmp_path / "cohort"
    result = runner.invoke(
        app, ["data", "synth", "--out", str(out), "--sites", "2", "--patients", "4", "--visits", "2"]
    )
    assert result.exit_code == 0, result.output
    assert runner.invoke(app, ["data", "check", str(out / "manifest.jsonl")]).exit_code == 0
    lines = (out / "manifest.jsonl").read_text().splitlines()
    bad = json.loads(lines[1])
    bad["age"] = 130
    lines[1] = json.dumps(bad)
    (out / "bad.jsonl").write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["data", "check", str(out / "bad.jsonl")])
    assert result.exit_code == 2
    assert "bad.jsonl:2: age" in result.output


def test_run_rejects_bad_config_with_the_key(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[dp]\nsample_rate = 3.0\n")
    result = runner.invoke(app, ["run", "--config", str(path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "dp.sample_rate" in result.output


def test_keys_init_refuses_overwrite(tmp_path):
    assert runner.invoke(app, ["keys", "init", "--out", str(tmp_path / "k"), "--sites", "2"]).exit_code == 0
    again = runner.invoke(app, ["keys", "init", "--out", str(tmp_path / "k"), "--sites", "2"])
    assert again.exit_code != 0


def test_client_builds_a_hardened_supernode_command(tmp_path):
    policy = tmp_path / "site0.toml"
    policy.write_text("[dp]\nenabled = true\ntarget_epsilon = 4.0\n")
    base = ["client", "--site", "site0", "--config", str(policy), "--superlink", "link.example:9092"]
    refused = runner.invoke(app, [*base, "--dry-run"])
    assert refused.exit_code == 2 and "--root-certificates" in refused.output  # no TLS, no node
    shown = runner.invoke(
        app,
        [
            *base,
            "--root-certificates",
            "ca.crt",
            "--auth-key",
            "node.key",
            "--runtime-port",
            "9200",
            "--dry-run",
        ],
    )
    assert shown.exit_code == 0, shown.output
    cmd = shlex.split(shown.output)
    assert cmd[0].endswith("flower-supernode") and "--insecure" not in cmd
    flags = dict(zip(cmd[1::2], cmd[2::2], strict=False))
    assert flags["--superlink"] == "link.example:9092" and flags["--root-certificates"] == "ca.crt"
    assert flags["--auth-supernode-private-key"] == "node.key"
    assert (flags["--host"], flags["--port"]) == ("127.0.0.1", "9200")  # the Runtime API stays local
    assert flags["--node-config"] == f"site='site0' config-file='{policy.resolve()}'"
