"""The run's own SuperLink (secure_fed.launch.superlink): on loopback only, its task taken only with the
run's secret, a FAB that carries no code, and gone when the run is."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest

from secure_fed.launch.superlink import SuperLinkError, local_superlink, start_run, take_task


def _listening(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp* write them) listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                local, state = line.split()[1], line.split()[3]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                    found.add(local.rsplit(":", 1)[0])
    return found


def _take_task(address: str, secret: bytes | None) -> str:
    from flwr.proto.runtime_pb2 import AcquireTaskRequest  # type: ignore[attr-defined]
    from flwr.supercore.constant import TaskType
    from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor, SuperExecAuthHttpInterceptor
    from flwr.supercore.runtime import RuntimeHttpClient

    interceptors: list = [RuntimeVersionHttpInterceptor(component_name="SuperExec")]
    if secret is not None:
        interceptors.append(
            SuperExecAuthHttpInterceptor(
                master_secret=secret, protected_methods={"/flwr.proto.Runtime/AcquireTask"}
            )
        )
    client = RuntimeHttpClient.from_server_address(
        server_address=address, insecure=True, root_certificates=None, interceptors=interceptors
    )
    try:
        task = client.AcquireTask(
            AcquireTaskRequest(supported_task_types=[TaskType.SIMULATION.value], agentapp_fab_hashes=[])
        )
        return str(task.token) if task.HasField("task") else ""
    finally:
        client.close()


@pytest.mark.slow
def test_the_superlink_listens_on_loopback_and_ends_with_the_block(tmp_path: Path) -> None:
    with local_superlink(tmp_path / "home", tmp_path / "logs" / "superlink.log") as link:
        port = int(link.address.rsplit(":", 1)[1])
        assert link.address.startswith("127.0.0.1:")
        assert _listening(port) == {"0100007F"}  # 127.0.0.1, nothing else
        assert (tmp_path / "home" / "superexec.secret").stat().st_mode & 0o077 == 0
        pid = link.pid
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert (tmp_path / "logs" / "superlink.log").exists()


@pytest.mark.slow
def test_another_local_process_cannot_take_the_runs_task(tmp_path: Path) -> None:
    """The attack: any local user can reach a loopback port. With the run started and its task
    pending, asking for it without the run's secret, or with another secret, gets nothing; the
    runner, with the secret, then gets it."""
    with local_superlink(tmp_path / "home", tmp_path / "superlink.log") as link:
        start_run(link, tmp_path / "spec.json", sites=3, client_cpus=1, client_gpus=0.0)
        for secret in (None, b"x" * 32):
            try:
                stolen = _take_task(link.address, secret)
            except Exception as err:  # noqa: BLE001 (Flower's client raises on the refusal)
                stolen = f"refused: {err}"
            assert stolen.startswith("refused"), stolen
        assert take_task(link)


def test_the_fab_carries_no_code(tmp_path: Path) -> None:
    """Like a hospital's node (issue 19), the simulation runs only the installed secure_fed: the FAB
    names the installed components and holds nothing else."""
    from flwr.cli.build import build_fab_from_files

    from secure_fed.launch.superlink import _PYPROJECT

    fab, _ = build_fab_from_files({"pyproject.toml": _PYPROJECT.encode()})
    names = [n for n in zipfile.ZipFile(io.BytesIO(fab)).namelist() if not n.startswith(".info/")]
    assert names == ["pyproject.toml"]
    assert 'serverapp = "secure_fed.launch.flower_apps:server_app"' in _PYPROJECT


def test_a_superlink_that_cannot_start_is_one_error_naming_its_log(tmp_path: Path, monkeypatch) -> None:
    import secure_fed.launch.superlink as sl

    monkeypatch.setattr(sl, "_START_TIMEOUT_S", 0.5)
    monkeypatch.setattr(sl.sys, "executable", str(tmp_path / "no-python"))
    with pytest.raises(SuperLinkError, match="could not be started"):
        with local_superlink(tmp_path / "home", tmp_path / "superlink.log"):
            pass


def _beats(link, token: str) -> bool:  # noqa: ANN001
    """Whether the SuperLink still holds the task ``token`` names (a heartbeat it acknowledges)."""
    import httpx
    from flwr.proto.runtime_pb2 import SendTaskHeartbeatRequest  # type: ignore[attr-defined]
    from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor, RuntimeVersionHttpInterceptor
    from flwr.supercore.runtime import RuntimeHttpClient

    client = RuntimeHttpClient.from_server_address(
        server_address=link.address,
        insecure=True,
        root_certificates=None,
        interceptors=[
            RuntimeVersionHttpInterceptor(component_name="flwr-simulation"),
            RuntimeTokenHttpInterceptor(token=token),
        ],
    )
    try:
        return bool(client.SendTaskHeartbeat(SendTaskHeartbeatRequest()).success)
    except httpx.HTTPStatusError:  # the token is no longer the SuperLink's: refused
        return False
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.parametrize(("heartbeat_s", "held"), [(1.0, False), (30.0, True)])
def test_the_runs_superlink_holds_a_taken_task_for_its_configured_heartbeat_window(
    tmp_path: Path, heartbeat_s: float, held: bool
) -> None:
    """Flower drops a taken task whose process has not beaten within its window (30 s to start):
    on a loaded machine whole runs were lost so. The run's SuperLink takes the window from
    `fed.simulation_heartbeat_s`: 2.5 s of silence drops the task at 1 s and not at 30 s."""
    import time

    with local_superlink(tmp_path / "home", tmp_path / "superlink.log", heartbeat_s=heartbeat_s) as link:
        start_run(link, tmp_path / "spec.json", sites=3, client_cpus=1, client_gpus=0.0)
        token = take_task(link)
        time.sleep(2.5)
        assert _beats(link, token) is held


def test_a_run_lost_to_a_lapsed_heartbeat_is_named_from_flowers_log(tmp_path: Path) -> None:
    from secure_fed.launch.runner import heartbeat_lapsed

    logs = tmp_path / "flower"
    logs.mkdir()
    (logs / "simulation.log").write_text("INFO : round 2\n")
    assert not heartbeat_lapsed(logs)
    (logs / "simulation.log").write_text(
        "ERROR : Runtime task-token authentication failed.\nINFO : Task stopped by user.\n"
    )
    assert heartbeat_lapsed(logs)
