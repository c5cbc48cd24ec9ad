"""`secure-fed client`: a hospital's hardened node (a Flower SuperNode that runs the site's
installed, approved code only), checked before it starts."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from secure_fed.cli.common import (
    console,
    fail,
    read_config,
)
from secure_fed.config import RunConfig


def client(
    site: Annotated[str, typer.Option(help="this hospital's site name (as in the cohort)")],
    config: Annotated[
        Path, typer.Option("--config", "-c", help="the SITE's own policy TOML (RunConfig tree)")
    ],
    superlink: Annotated[
        str, typer.Option(help="SuperLink address host:port (its --port; Flower's default is 8000)")
    ] = "127.0.0.1:8000",
    keys: Annotated[
        Path | None, typer.Option(help="this site's key folder (signing key for its audit log)")
    ] = None,
    root_certificates: Annotated[
        Path | None, typer.Option(help="CA certificate of the SuperLink (TLS)")
    ] = None,
    auth_key: Annotated[
        Path | None, typer.Option(help="SuperNode private key (SuperNode authentication)")
    ] = None,
    insecure: Annotated[bool, typer.Option(help="no TLS (local tests only)")] = False,
    runtime_port: Annotated[
        int,
        typer.Option(help="port of the node's local Runtime API (127.0.0.1 only; one per node on a host)"),
    ] = 9094,
    dry_run: Annotated[bool, typer.Option(help="print the command instead of running it")] = False,
    prepare_only: Annotated[
        bool, typer.Option(help="check, fill the model and data caches, and exit (no node)")
    ] = False,
) -> None:
    """Run this hospital's hardened node: a Flower SuperNode whose ClientApp takes every privacy
    setting from the site's own --config, never from the server, with telemetry off.

    Example: secure-fed client --site site0 --config site0.toml --superlink link.hospital.net:8000
    --root-certificates ca.crt --auth-key node.key --keys keys
    """
    from secure_fed.launch.preflight import PreflightError, check_connection, check_node

    policy = read_config(config, {})  # fail here, not mid-round, on a bad policy file
    if not insecure and root_certificates is None and not prepare_only:
        fail("TLS needs --root-certificates (or pass --insecure for a local test)")
    try:  # seconds, before any SuperNode, Flower or pretraining starts
        check_connection(superlink, runtime_port, insecure, root_certificates)
        check_node(policy, config, site, keys, root_certificates, auth_key)
    except PreflightError as err:
        fail(str(err))
    approvals = None if prepare_only else _approved_fabs(policy, config)
    # Absolute paths: the SuperNode's ClientApp processes and a service file run from other folders.
    root_certificates = root_certificates.resolve() if root_certificates is not None else None
    auth_key = auth_key.resolve() if auth_key is not None else None
    cmd = _supernode_command(
        site, config, superlink, keys, approvals, insecure, root_certificates, auth_key, runtime_port
    )
    from secure_fed.launch.approved_app import node_path, write_launcher

    # Flower's SuperExec starts `flwr-clientapp` from PATH for every message; ours comes first, and
    # runs the site's installed code for approved FABs only (secure_fed/launch/approved_app.py).
    node_bin = Path(policy.out).resolve() / "node-bin"
    env = {**os.environ, "PATH": node_path(node_bin, os.environ.get("PATH"))}
    if not prepare_only:
        write_launcher(node_bin)
    if dry_run:
        _print_node_command(node_bin, cmd)
        return
    _prepare_site(policy, site)
    if prepare_only:
        console.print(f"{site}: ready")
        return
    tls = "without TLS" if insecure else f"with TLS (CA {root_certificates})"
    _run_node(cmd, env, site, superlink, tls)


# systemd's PATH for a service: what a node's unit runs with after the launcher and the venv
_SERVICE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _approved_fabs(policy: RunConfig, config: Path) -> Path:
    """The site's approval list, absolute; refused when it pins no FAB (the node would run nothing)."""
    from secure_fed.launch.approved_app import ApprovalError, approved_hashes

    if policy.deploy.approved_fabs is None:
        fail(
            f"{config}: [deploy] approved_fabs is not set: name the file that pins the FABs this site "
            f"runs, then `secure-fed code review FAB` and `secure-fed code approve FAB --config {config}`"
        )
    approvals = Path(str(policy.deploy.approved_fabs)).resolve()
    try:
        pinned = approved_hashes(approvals)
    except ApprovalError as err:
        fail(str(err))
    if not pinned:
        fail(
            f"{approvals}: this site has approved no FAB: review the run's FAB with `secure-fed code "
            f"review FAB`, then `secure-fed code approve FAB --config {config}`"
        )
    return approvals


def _supernode_command(
    site: str,
    config: Path,
    superlink: str,
    keys: Path | None,
    approvals: Path | None,
    insecure: bool,
    root_certificates: Path | None,
    auth_key: Path | None,
    runtime_port: int,
) -> list[str]:
    """flower-supernode's command line, every path in it absolute."""
    node_config = f"site='{site}' config-file='{config.resolve()}'"
    if keys is not None:
        node_config += f" keys-dir='{keys.resolve()}'"
    if approvals is not None:
        node_config += f" approved-fabs='{approvals}'"
    beside = Path(sys.executable).parent / "flower-supernode"
    exe = str(beside) if beside.exists() else shutil.which("flower-supernode") or "flower-supernode"
    # The Runtime API (ClientApp processes ↔ SuperNode) stays on loopback, whatever Flower's default.
    cmd = [exe, "--superlink", superlink, "--node-config", node_config]
    cmd += ["--host", "127.0.0.1", "--port", str(runtime_port)]
    cmd += ["--insecure"] if insecure else ["--root-certificates", str(root_certificates)]
    if auth_key is not None:
        cmd += ["--auth-supernode-private-key", str(auth_key)]
    return cmd


def _print_node_command(node_bin: Path, cmd: list[str]) -> None:
    """--dry-run: the launcher and the node's command, quoted, unwrapped, with the hardening a
    service file would not get: ready to paste."""
    from secure_fed._env import node_environment
    from secure_fed.launch.approved_app import launcher_text, node_path

    typer.echo(f"# {node_bin / 'flwr-clientapp'}: {launcher_text().splitlines()[-1]}")
    hardening = [f"{key}={value}" for key, value in node_environment().items()]
    # the service's PATH, not this shell's: the operator's own folders have no place in a unit file
    service = node_path(node_bin, _SERVICE_PATH)
    typer.echo(shlex.join(["env", *hardening, f"PATH={service}", *cmd]))


def _prepare_site(policy: RunConfig, site: str) -> None:
    from secure_fed.launch.preflight import prepare_site

    # The base model and the site's data are ready before the node connects, not in its first
    # message: the first pretraining takes minutes on a CPU.
    console.print(
        f"{site}: preparing the model base and the site's data (cache {policy.model.cache_dir.resolve()})"
    )
    try:
        prepare_site(policy, site)
    except (OSError, ValueError) as err:
        fail(f"{site}: {err}")


def _run_node(cmd: list[str], env: dict[str, str], site: str, superlink: str, tls: str) -> NoReturn:
    from secure_fed.launch.supervise import run_node

    # The SuperNode process does not import secure_fed itself: hand it the hardened environment.
    # Its SuperExec child would outlive it; run_node ends the whole process group with it.
    console.print(f"{site}: SuperNode dialling SuperLink {superlink} {tls}")
    status = run_node(cmd, env=env)
    if status not in (0, 130, 143):  # not a clean end, nor Ctrl-C / SIGTERM from the operator
        console.print(
            f"[red]error:[/red] {site}: the SuperNode dialling {superlink} {tls} ended with status "
            f"{status}; its reason is in the lines above (refused: register the node's .pub with "
            "`flwr supernode register`; unreachable: the SuperLink's --port and this address must "
            "match; certificate: it must name the host in --superlink)"
        )
    raise typer.Exit(status)
