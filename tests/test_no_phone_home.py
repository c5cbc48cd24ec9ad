"""No phone home: importing secure_fed switches off Flower's telemetry and update check and Ray's
usage stats whatever the host environment says, and a run opens no connection off this machine.

Flower reads FLWR_TELEMETRY_ENABLED once, when `flwr.supercore.telemetry` is imported, and
`event()` always starts a thread that builds the event; only the send is skipped when the flag is
"0". The tests therefore watch the sender (urllib) and the network calls under it (DNS, connect).
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.server.test_deployment import is_loopback

FORCED = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
}
HOSTILE = {
    "FLWR_TELEMETRY_ENABLED": "1",
    "FLWR_DISABLE_UPDATE_CHECK": "0",
    "RAY_USAGE_STATS_ENABLED": "1",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",
}


def python_in(cwd: Path, code: str, env: dict[str, str]) -> dict:
    """Run `code` in a fresh interpreter outside the repository, so the installed package (as the
    `secure-fed` console script and Flower's app loader see it) is what gets imported."""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def hostile_env() -> dict[str, str]:
    drop = (*FORCED, "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(HOSTILE)
    env["HF_HUB_OFFLINE"] = "0"  # a default, not forced: a user may point at a model hub on purpose
    return env


def test_importing_secure_fed_forces_the_environment(tmp_path: Path) -> None:
    seen = python_in(
        tmp_path,
        "import json, os, secure_fed\n"
        f"keys = {sorted([*FORCED, 'HF_HUB_OFFLINE', 'TRANSFORMERS_OFFLINE'])!r}\n"
        "print(json.dumps({'file': secure_fed.__file__, **{k: os.environ.get(k) for k in keys}}))",
        hostile_env(),
    )
    # A namespace package (a stale editable install) would skip __init__ and with it the hardening.
    assert seen.pop("file", None) is not None and seen.get("FLWR_TELEMETRY_ENABLED") == "0"
    assert {k: seen[k] for k in FORCED} == FORCED
    assert seen["HF_HUB_OFFLINE"] == "0" and seen["TRANSFORMERS_OFFLINE"] == "1"


def test_ray_would_bind_to_loopback(tmp_path: Path) -> None:
    """What makes Ray's node (GCS, raylet, workers) use 127.0.0.1 and not the outward address."""
    seen = python_in(
        tmp_path,
        "import json, secure_fed\n"
        "from ray._private import ray_constants, services\n"
        "print(json.dumps({'cluster': ray_constants.ENABLE_RAY_CLUSTER,\n"
        "                  'ip': services.resolve_ip_for_localhost('127.0.0.1')}))",
        hostile_env(),
    )
    assert seen["cluster"] is False and is_loopback(seen["ip"])


def test_telemetry_is_off_even_when_flower_was_imported_first(tmp_path: Path) -> None:
    env = hostile_env()
    env.pop("FLWR_TELEMETRY_ENABLED")  # the usual host: nobody set it, Flower's default is "1"
    seen = python_in(
        tmp_path,
        "import json, flwr.app, secure_fed\n"
        "from flwr.supercore import telemetry\n"
        "print(json.dumps({'flag': telemetry.FLWR_TELEMETRY_ENABLED}))",
        env,
    )
    assert seen["flag"] == "0"


@pytest.fixture
def outbound(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[str, object]]:
    """Records (and refuses) every HTTP send, name lookup and connection that would leave the host."""
    import urllib.request

    attempts: list[tuple[str, object]] = []
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr_home"))  # telemetry keeps a source id there

    def urlopen(request: object, *args: object, **kwargs: object) -> object:
        attempts.append(("urlopen", getattr(request, "full_url", request)))
        raise OSError("blocked by test_no_phone_home")

    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
        if host is not None and host != "localhost" and not _ip_literal(str(host)):
            attempts.append(("dns", host))  # a name lookup: the first step out; addresses go to connect
            raise socket.gaierror("blocked by test_no_phone_home")
        return real_getaddrinfo(host, *args, **kwargs)

    real_connect = socket.socket.connect

    def connect(sock: socket.socket, address: object) -> object:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _loopback_literal(str(address[0])):
            attempts.append(("connect", address))
            raise OSError("blocked by test_no_phone_home")
        return real_connect(sock, address)

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    return attempts


def _ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    return True


def _loopback_literal(host: str) -> bool:
    try:
        return is_loopback(host)
    except ValueError:
        return False  # a name, not an address


def test_outbound_guard_catches_a_send(outbound: list) -> None:
    import urllib.request

    with pytest.raises(OSError):
        urllib.request.urlopen("https://telemetry.flower.ai/api/v1/event", timeout=1)
    with pytest.raises(OSError):
        socket.create_connection(("192.0.2.1", 443), timeout=1)
    with pytest.raises(OSError):
        socket.getaddrinfo("telemetry.flower.ai", 443)
    assert [kind for kind, _ in outbound] == ["urlopen", "connect", "dns"]


def test_flower_telemetry_and_update_check_send_nothing(
    outbound: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flwr.supercore import telemetry, update_check

    assert telemetry.FLWR_TELEMETRY_ENABLED == "0"
    assert telemetry.create_event(telemetry.EventType.PING, {"probe": True}) == "disabled"
    assert telemetry.event(telemetry.EventType.PING).result(timeout=30) == "disabled"

    calls: list[str] = []
    monkeypatch.setattr(update_check.requests, "post", lambda *a, **k: calls.append("post"))
    monkeypatch.setattr(
        update_check, "_start_flwr_update_check_refresh_thread", lambda *a, **k: calls.append("thread")
    )
    update_check.warn_if_flwr_update_available(process_name="test")
    assert calls == []
    assert outbound == []


@pytest.mark.slow  # a whole run in process: make test-fast leaves it out
def test_a_run_opens_no_outbound_connection(outbound: list, make_config, tmp_path: Path) -> None:
    from flwr.supercore import telemetry

    from secure_fed.launch.runner import run_inprocess

    cfg = make_config(fed__rounds=1, fed__method="fedavg")
    outcome = run_inprocess(cfg, tmp_path / "run")
    assert outcome.metrics["rounds"] == 1
    assert telemetry.event(telemetry.EventType.PING).result(timeout=30) == "disabled"
    assert outbound == []
