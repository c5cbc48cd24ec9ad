"""Flower's supported simulation path for one `secure-fed run`: a SuperLink of the run's own, and the
run submitted to it the way `flwr run` submits one.

Flower 1.42 deprecates `flwr.simulation.run_simulation`; a simulation is a run of a SuperLink in
simulation mode, executed by a simulation process that takes the run's task from it
(`flwr.simulation.run_simulation_process`). `flwr run` would start a detached SuperLink on fixed
ports with its state in ~/.flwr that outlives the command; here the SuperLink is this run's child,
on a free 127.0.0.1 port, with its state in memory and FLWR_HOME in a folder that goes with the run,
and it ends with the run. It starts no simulation process of its own (`--isolation process`): the
runner starts one it controls, so Ray stays on loopback without its dashboard and a stop still signs
every party's log (runner.run_simulation). Taking a task needs a secret only this run holds, so
another local user cannot take the run's task from the SuperLink.

The FAB carries no code: only a pyproject.toml naming the installed `secure_fed.launch.flower_apps`
components, so the simulation, like a hospital's node, runs only the installed secure_fed.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# what the FAB holds: the components are the installed package's, the one config key names the
# run's spec file (runner.run_simulation writes it)
_PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "secure-fed-simulation"
version = "1.0.0"
description = "secure-fed run on Flower's simulation runtime (components from the installed secure_fed)"
dependencies = []

[tool.flwr.app]
publisher = "secure-fed"

[tool.flwr.app.components]
serverapp = "secure_fed.launch.flower_apps:server_app"
clientapp = "secure_fed.launch.flower_apps:client_app"

[tool.flwr.app.config]
spec = ""
"""

# The task's heartbeat windows (taking the task: the interval; running: twice it) come from one
# constant that Flower's SuperLink binds when it imports its state; this run's SuperLink sets it
# first. The simulation process still beats every ~20 s, so a long window only tolerates a late beat.
_SUPERLINK_MAIN = (
    "import flwr.common.constant as constant; constant.HEARTBEAT_DEFAULT_INTERVAL = {heartbeat_s!r}; "
    "from flwr.superlink.cli import flower_superlink; flower_superlink()"
)
DEFAULT_HEARTBEAT_S = 600.0
# what Flower writes where the SuperLink has dropped the task (its heartbeat window lapsed)
LAPSED = ("task-token authentication failed", "No heartbeat received from the task")
_START_TIMEOUT_S = 60.0  # a loaded 2-core machine took 1.3 s quiet


class SuperLinkError(RuntimeError):
    """The run's SuperLink did not start or did not take the run."""


@dataclass(frozen=True)
class LocalSuperLink:
    address: str  # 127.0.0.1:<port>: Control, Runtime and Fleet APIs share it
    secret: bytes  # taking a task is signed with it (SuperLink's --superexec-auth-secret-file)
    pid: int


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def end_with_parent() -> None:
    """SIGTERM to this process when its parent dies, however it dies (Linux's PR_SET_PDEATHSIG); a
    parent already gone before the call gets this process the same signal."""
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def _healthy(address: str) -> bool:
    import httpx

    try:  # trust_env=False: a loopback probe never goes through a proxy from the environment
        return httpx.get(f"http://{address}/health", timeout=1.0, trust_env=False).is_success
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def local_superlink(
    home: Path, log_file: Path, heartbeat_s: float = DEFAULT_HEARTBEAT_S
) -> Iterator[LocalSuperLink]:
    """A SuperLink in simulation mode on 127.0.0.1, for as long as the block runs.

    ``home``: its FLWR_HOME (the secret is written there, 0600). ``log_file``: the SuperLink's own log.
    ``heartbeat_s``: how long it keeps a taken task without a heartbeat (`fed.simulation_heartbeat_s`).
    """
    home.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_bytes(32)
    secret_file = home / "superexec.secret"
    secret_file.touch(mode=0o600)
    secret_file.write_bytes(secret)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
    }
    errors = home / "superlink.stderr"
    for _ in range(3):  # another process may take the probed port before the SuperLink binds it
        address = f"127.0.0.1:{_free_loopback_port()}"
        with errors.open("wb") as sink:
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-c", _SUPERLINK_MAIN.format(heartbeat_s=float(heartbeat_s)),
                     "--insecure", "--simulation", "--isolation", "process",
                     "--disable-runtime-dependency-installation",
                     "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1],
                     "--log-file", str(log_file),
                     "--superexec-auth-secret-file", str(secret_file)],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=sink,
                    preexec_fn=end_with_parent,
                )  # fmt: skip
            except OSError as err:
                raise SuperLinkError(
                    f"Flower's SuperLink could not be started with {sys.executable}: {err}"
                ) from None
        deadline = time.monotonic() + _START_TIMEOUT_S
        while proc.poll() is None and time.monotonic() < deadline and not _healthy(address):
            time.sleep(0.05)
        if proc.poll() is None and _healthy(address):
            break
        _stop(proc)
    else:
        tail = errors.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise SuperLinkError(f"Flower's SuperLink did not start on 127.0.0.1 ({tail[0]}); see {log_file}")
    try:
        yield LocalSuperLink(address, secret, proc.pid)
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def submit(link: LocalSuperLink, spec: Path, sites: int, client_cpus: float, client_gpus: float) -> str:
    """Start the run on ``link`` and take its task: the token run_simulation_process needs."""
    start_run(link, spec, sites, client_cpus, client_gpus)
    return take_task(link)


def start_run(link: LocalSuperLink, spec: Path, sites: int, client_cpus: float, client_gpus: float) -> None:
    """What `flwr run` sends: the FAB, the run config (the spec file's path) and the federation's
    simulation settings."""
    from flwr.cli.build import build_fab_from_files
    from flwr.common.serde import fab_to_proto, user_config_to_proto
    from flwr.proto.control_pb2 import StartRunRequest  # type: ignore[attr-defined]
    from flwr.proto.federation_config_pb2 import SimulationConfig  # type: ignore[attr-defined]
    from flwr.supercore.control import ControlHttpClient
    from flwr.supercore.fab import Fab
    from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor

    fab_bytes, _ = build_fab_from_files({"pyproject.toml": _PYPROJECT.encode()})
    fab = Fab(hashlib.sha256(fab_bytes).hexdigest(), fab_bytes, {})
    control = ControlHttpClient.from_server_address(
        server_address=link.address,
        insecure=True,
        root_certificates=None,
        interceptors=[RuntimeVersionHttpInterceptor(component_name="secure-fed")],
    )
    try:
        started = control.StartRun(
            StartRunRequest(
                fab=fab_to_proto(fab),
                override_config=user_config_to_proto({"spec": str(spec)}),
                federation="",
                override_federation_config=SimulationConfig(
                    num_supernodes=sites,
                    client_resources_num_cpus=client_cpus,
                    client_resources_num_gpus=client_gpus,
                    init_args_num_cpus=2,
                    init_args_log_to_driver=False,
                ),
            )
        )
    finally:
        control.close()
    if not started.HasField("run_id"):
        raise SuperLinkError(f"Flower's SuperLink did not take the run ({started.note or 'no reason given'})")


def take_task(link: LocalSuperLink) -> str:
    """The run's simulation task, taken with the run's secret (as a SuperExec takes one)."""
    from flwr.proto.runtime_pb2 import AcquireTaskRequest  # type: ignore[attr-defined]
    from flwr.supercore.constant import TaskType
    from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor, SuperExecAuthHttpInterceptor
    from flwr.supercore.runtime import RuntimeHttpClient

    runtime = RuntimeHttpClient.from_server_address(
        server_address=link.address,
        insecure=True,
        root_certificates=None,
        interceptors=[
            RuntimeVersionHttpInterceptor(component_name="SuperExec"),
            SuperExecAuthHttpInterceptor(
                master_secret=link.secret, protected_methods={"/flwr.proto.Runtime/AcquireTask"}
            ),
        ],
    )
    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            task = runtime.AcquireTask(
                AcquireTaskRequest(supported_task_types=[TaskType.SIMULATION.value], agentapp_fab_hashes=[])
            )
            if task.HasField("task") and task.token:
                return str(task.token)
            time.sleep(0.05)
    finally:
        runtime.close()
    raise SuperLinkError(f"Flower's SuperLink at {link.address} offered no simulation task for the run")
