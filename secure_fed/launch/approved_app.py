"""A hospital's `flwr-clientapp`: the site runs its own installed code, and only for FABs it approved.

In Flower's deployment runtime the SuperLink hands every node the run's FAB, and Flower's own
`flwr-clientapp` installs it and imports its ClientApp with the FAB's folder first on `sys.path`:
the server chooses the code a hospital runs. `secure-fed client` therefore puts a private folder
first on the SuperNode's PATH whose `flwr-clientapp` starts `main` below (SuperExec resolves that
name on PATH for every message). `main` takes flwr-clientapp's arguments and talks to the SuperNode
through Flower's own Runtime-API functions, but never installs or imports anything of the FAB:

- it hashes the FAB's bytes itself (the `hash_str` beside them is the server's word) and looks the
  SHA-256 up in the site's approval list (`[deploy] approved_fabs`, written by `secure-fed code
  approve` after `secure-fed code review`);
- not approved: nothing of it is imported; the reply is an error without content ("FAB sha256 … is
  not approved by this site": the SuperNode waits for a reply to every message, so none at all
  would stall the node), the task ends FAILED with one line, a signed `code_refused` record goes
  to the site's audit log of that run, and one line on stderr names the hash and the command that
  would approve it;
- approved: it runs `secure_fed.launch.client_app:app` of the site's installed package (nothing but the
  interpreter's own paths on `sys.path`), after a signed `code` record (the FAB's SHA-256, the digest
  of the installed package's .py files, its version) once per run in the site's audit log.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shlex
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import secure_fed
from secure_fed.protocol.stops import signed_on_stop

LAUNCHER = "flwr-clientapp"  # the name Flower's SuperExec starts (TASK_TYPE_TO_COMMAND)
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_MAX_FAB_BYTES = 256 * 1024 * 1024  # a FAB is source code; a larger "FAB" is refused, not unpacked
# The research harness ships in the package but is no code the node runs (nothing else imports it,
# tests/test_layers.py) and the FAB leaves it out (pyproject.toml's fab-exclude): it is neither
# compared with a FAB nor part of the digest of the code the node runs.
_NOT_APPROVED_CODE = ("lab",)


class ApprovalError(ValueError):
    """The approval list or a FAB cannot be read; the message is one line naming the file."""


# -- what the site runs ------------------------------------------------------------------------


def fab_sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def package_root() -> Path:
    return Path(secure_fed.__file__).resolve().parent


def package_files(root: Path | None = None) -> dict[str, bytes]:
    """The installed package's .py files by path inside the FAB (`secure_fed/...`), sorted; the
    lab's left out, as the FAB leaves them out."""
    root = root or package_root()
    files = {
        PurePosixPath("secure_fed", *path.relative_to(root).parts).as_posix(): path.read_bytes()
        for path in root.rglob("*.py")
        if "__pycache__" not in path.parts and path.relative_to(root).parts[0] not in _NOT_APPROVED_CODE
    }
    return dict(sorted(files.items()))


def package_digest(root: Path | None = None) -> str:
    """SHA-256 over 'path,sha256' lines of the package's sorted .py files: what an auditor compares
    with the same digest of a release, whatever the install's folder."""
    lines = "".join(f"{name},{fab_sha256(data)}\n" for name, data in package_files(root).items())
    return fab_sha256(lines.encode())


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("secure-fed")
    except PackageNotFoundError:
        return "unknown"


# -- approvals ---------------------------------------------------------------------------------


def load_approvals(path: Path) -> list[dict[str, Any]]:
    """The site's approved FABs ([] when the file does not exist yet)."""
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ApprovalError(f"{path}: unreadable approval list ({err}); restore it or approve again") from err
    entries = data.get("approved") if isinstance(data, dict) else None

    def pinned(entry: Any) -> bool:
        return (
            isinstance(entry, dict)
            and isinstance(entry.get("sha256"), str)
            and bool(_HEX64.match(entry["sha256"]))
        )

    if not isinstance(entries, list) or not all(pinned(entry) for entry in entries):
        raise ApprovalError(
            f'{path}: not an approval list ({{"approved": [{{"sha256": ...}}]}}); '
            "restore it or approve again with `secure-fed code approve`"
        )
    return entries


def approved_hashes(path: Path) -> set[str]:
    return {entry["sha256"] for entry in load_approvals(path)}


def read_fab(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > _MAX_FAB_BYTES:
            raise ApprovalError(f"{path}: {size} bytes is no FAB (source code); check the file")
        return path.read_bytes()
    except OSError as err:
        raise ApprovalError(f"{path}: cannot read the FAB ({err.strerror or err}); check the path") from err


def fab_members(content: bytes, where: Path) -> dict[str, bytes]:
    """The FAB's files, read in memory (nothing is extracted to disk)."""
    try:
        with zipfile.ZipFile(io.BytesIO(content)) as fab:
            return {info.filename: fab.read(info) for info in fab.infolist() if not info.is_dir()}
    except (zipfile.BadZipFile, ValueError, OSError) as err:
        raise ApprovalError(f"{where}: not a FAB (a zip built by `flwr build`): {err}") from err


@dataclass
class Review:
    sha256: str
    files: list[tuple[str, str]]  # (path in the FAB, same | differs | not in the site's package | not code)
    missing: list[str]  # the site's package files the FAB lacks


def review_fab(path: Path) -> Review:
    content = read_fab(path)
    members = fab_members(content, path)
    installed = package_files()
    files = []
    for name, data in sorted(members.items()):
        if name in installed:
            files.append((name, "same" if installed[name] == data else "differs"))
        elif name.endswith(".py"):
            files.append((name, "not in the site's package"))
        else:
            files.append((name, "not code"))
    missing = [name for name in installed if name not in members]
    return Review(fab_sha256(content), files, missing)


def approve_fab(approvals: Path, fab: Path, by: str, note: str) -> tuple[str, bool]:
    """Pin the FAB's SHA-256 in the approval list; (sha256, newly added)."""
    sha = fab_sha256(read_fab(fab))
    fab_members(read_fab(fab), fab)  # a FAB, not any file
    entries = load_approvals(approvals)
    if any(entry["sha256"] == sha for entry in entries):
        return sha, False
    entries.append(
        {
            "sha256": sha,
            "fab": fab.name,
            "approved_by": by,
            "approved_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "note": note,
            "package_digest": package_digest(),  # the code the node will run for it
        }
    )
    approvals.parent.mkdir(parents=True, exist_ok=True)
    partial = approvals.with_name(approvals.name + ".partial")
    partial.write_text(json.dumps({"approved": entries}, indent=2) + "\n", encoding="utf-8")
    os.replace(partial, approvals)  # never half a list: the node reads it for every message
    return sha, True


# -- the launcher `secure-fed client` puts first on the SuperNode's PATH -----------------------


def launcher_text(python: str | None = None) -> str:
    # -I: neither the working folder nor PYTHONPATH nor the user's site-packages reach sys.path, so
    # only the interpreter's installed packages (the site's secure_fed among them) can be imported.
    python = python or sys.executable
    return f'#!/bin/sh\nexec {shlex.quote(python)} -I -m secure_fed.launch.approved_app "$@"\n'


def write_launcher(folder: Path) -> Path:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / LAUNCHER
    partial = folder / f".{LAUNCHER}.partial.{os.getpid()}"  # nodes of one host may share the folder
    partial.write_text(launcher_text())
    partial.chmod(0o700)
    os.replace(partial, path)
    return path


def node_path(folder: Path, path: str | None) -> str:
    """The SuperNode's PATH: the launcher first, then this interpreter's own scripts (so SuperExec
    is the installed one), then the operator's PATH."""
    parts = [str(folder), str(Path(sys.executable).parent)]
    return os.pathsep.join(parts + ([path] if path else []))


# -- the runner --------------------------------------------------------------------------------


def _site_log(node: dict[str, Any], run_id: str, existing: bool = False) -> tuple[Any, str] | None:
    """The site's audit log of this run, opened, and the site; None where the node has none (or,
    with `existing`, where the site has no log of this run yet)."""
    from secure_fed.audits.keys import load_private_key
    from secure_fed.audits.log import AuditLog
    from secure_fed.config import load_config
    from secure_fed.protocol.run_context import run_folder

    if "keys-dir" not in node or "site" not in node:
        return None
    site = str(node["site"])
    cfg = load_config(Path(str(node["config-file"])))
    path = run_folder(cfg, run_id) / "audit" / f"{site}.jsonl"
    if existing and not path.exists():
        return None
    return AuditLog(path, site, run_id, load_private_key(Path(str(node["keys-dir"])), site)), site


def _logged(log: Any, event: str, payload: dict[str, Any]) -> bool:
    from secure_fed.audits.reader import read_log

    if not log.path.exists():
        return False
    records = (line.record for line in read_log(log.path) if line.record is not None)
    return any(r.get("event") == event and r.get("payload") == payload for r in records)


def log_code(node: dict[str, Any], run_id: str, event: str, payload: dict[str, Any], close: bool) -> None:
    """One signed record per run and code (a run sends a node many messages, each a process)."""
    opened = _site_log(node, run_id)
    if opened is None:
        return
    log, site = opened
    try:
        payload = {"site": site, **payload}
        if not log.closed and not _logged(log, event, payload):  # closed: the run ended for this site
            log.append(event, payload)
            if close:  # a refused run ends here for this site: its log verifies as complete
                log.close()
    finally:
        log.abandon()  # releases the file (no head): the site's ClientApp continues this log


def _round_of(message: Any) -> int | None:
    """The round a server message is for, as its request names it (None for a run-level phase)."""
    from secure_fed.protocol.wire import from_records

    try:
        request = from_records(message.content)
    except Exception:  # noqa: BLE001 (a stop is signed whether or not the message can be read)
        return None
    value = request.get("round", request.get("round_id"))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def sign_site_stop(node: dict[str, Any], run_id: str, reason: str, round_id: int | None) -> bool:
    """The site's signed `run_aborted` {"signal", "round"} ends its own log of this run; True when
    one was written. Only a run the site took part in: where it has no log of the run, or its log is
    closed (a refused FAB, a finished run), nothing is written. No head record: the log shows the run
    was stopped here, not finished.

    The log this process's ClientApp holds open (its runtime's trail, locked against a second
    writer) is the one signed; else the site's log of the run is reopened, which continues its chain.
    """
    payload = {"signal": reason, "round": round_id}
    site_app = sys.modules.get("secure_fed.launch.client_app")
    runtimes = getattr(site_app, "_RUNTIMES", {}) if site_app is not None else {}
    held = [
        runtime.trail.log
        for key, runtime in list(runtimes.items())
        if key[-1] == run_id and getattr(runtime, "trail", None) is not None
    ]
    if held:
        signed = False
        for log_ in held:
            if not log_.closed:
                log_.append("run_aborted", payload, round=round_id)
                signed = True
            log_.abandon()  # released without a head, as a node's next process would find it
        return signed
    opened = _site_log(node, run_id, existing=True)
    if opened is None:
        return False
    log_, _site = opened
    try:
        if log_.closed:
            return False
        log_.append("run_aborted", payload, round=round_id)
        return True
    finally:
        log_.abandon()


@contextlib.contextmanager
def signed_site_stops(task: dict[str, Any]) -> Iterator[None]:
    """Flower never tells a site's ClientApp that the SuperLink stopped its run; the task's process
    is stopped by a signal: SIGTERM from the node's service manager (`secure-fed client` ends the
    node's whole process group), SIGINT from Flower's task heartbeat once the SuperNode ended the
    task, or from its parent monitor once the SuperExec is gone. On either, the site's log of the run
    in `task` (its "node", "run_id" and "message", filled in as they are known) ends with the site's
    own signed `run_aborted` naming the signal, and then Flower's handler goes on (it reports the
    task's end and exits). The handler only raises: signing inside it could land between a record's
    write and its chain moving on."""

    def sign(name: str) -> None:
        if "run_id" not in task:
            return
        try:
            sign_site_stop(task["node"], task["run_id"], name, _round_of(task.get("message")))
        except Exception as err:  # noqa: BLE001 (the stop goes on; verify then names the gap)
            print(f"secure-fed: run {task['run_id']}: stop not signed: {err}", file=sys.stderr, flush=True)

    def stopped() -> None:
        task["stopped"] = True  # no reply leaves after a stop the site signed

    with signed_on_stop(sign, on_signal=stopped):
        yield


def approvals_path(node: dict[str, Any]) -> Path | None:
    from secure_fed.config import load_config

    if "approved-fabs" in node:  # `secure-fed client` resolved it: the decision reads no other file
        return Path(str(node["approved-fabs"]))
    if "config-file" not in node:
        return None
    path = load_config(Path(str(node["config-file"]))).deploy.approved_fabs
    return Path(path) if path is not None else None


def refusal(node: dict[str, Any], sha: str) -> str | None:
    """Why this FAB must not run here (one line), or None when the site approved it."""
    path = approvals_path(node)
    if path is None:
        return (
            "the node has no approval list ([deploy] approved_fabs in its policy; start it with "
            "`secure-fed client`)"
        )
    try:
        if sha in approved_hashes(path):
            return None
    except ApprovalError as err:
        return str(err)
    config = node.get("config-file", "SITE.toml")
    return (
        f"FAB sha256 {sha} is not approved by this site ({path}); after review, approve it with "
        f"`secure-fed code approve FAB --config {config}`"
    )


def load_site_app() -> Any:
    """The ClientApp of the site's installed secure_fed, never one from a FAB or the working folder."""
    here = {"", ".", os.getcwd()}
    sys.path[:] = [entry for entry in sys.path if entry not in here]
    from secure_fed.launch import client_app as site_app

    root = package_root()
    if Path(site_app.__file__ or "").resolve().parent.parent != root:
        raise ImportError(
            f"secure_fed.launch.client_app came from {site_app.__file__}, not the site's {root}"
        )
    return site_app.app


@dataclass
class _Task:
    """What flwr-clientapp reports when the task ends, however it ends (done, raised or a signal):
    the exit handler reads it at that moment, so every step updates it in place."""

    sub_status: str
    exit_code: int
    details: str = "the site's ClientApp failed"
    heartbeat: Any = None
    context: Any = None
    reply: Any = None
    message: Any = None
    refused: bool = False


def _runtime_client(args: Any, token: Any, retry_invoker: Any) -> Any:
    """The SuperNode's Runtime API client, configured exactly as flwr-clientapp configures it."""
    from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor, RuntimeVersionHttpInterceptor
    from flwr.supercore.runtime import RuntimeHttpClient
    from flwr.supercore.runtime.tracing import RuntimeTracingInterceptor
    from flwr.supercore.tls import validate_and_resolve_root_certificates

    return RuntimeHttpClient.from_server_address(
        server_address=args.runtime_api_address,
        insecure=args.insecure,
        root_certificates=validate_and_resolve_root_certificates(args.root_certificates, args.insecure),
        interceptors=[
            RuntimeTracingInterceptor(),
            RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"),
            RuntimeTokenHttpInterceptor(token),
        ],
        retry_invoker=retry_invoker,
    )


def _refuse(state: _Task, node: dict[str, Any], run: Any, sha: str, why: str) -> None:
    """Answer a FAB this site did not approve without running any of it, and sign the refusal."""
    from flwr.app import Error, Message
    from flwr.common.constant import ErrorCode

    run_id = str(run.run_id)
    # An error reply without content: Flower's SuperNode handles one message at a time and
    # waits for its reply, so a message left unanswered would stall the node for every
    # later run. The server learns that this site refused this FAB, nothing else.
    refused_error = Error(
        code=ErrorCode.LOAD_CLIENT_APP_EXCEPTION,
        reason=f"FAB sha256 {sha} is not approved by this site",
    )
    state.reply, state.message = Message(refused_error, reply_to=state.message), None
    state.details = f"refused: {why}"
    print(f"secure-fed: run {run_id}: {why}", file=sys.stderr, flush=True)
    try:
        log_code(node, run_id, "code_refused", {"fab_sha256": sha, "fab_id": run.fab_id}, close=True)
    except Exception as err:  # noqa: BLE001 (the refusal stands whether or not it is logged)
        print(f"secure-fed: run {run_id}: refusal not logged: {err}", file=sys.stderr, flush=True)
    state.refused = True


def _serve_task(client: Any, state: _Task) -> None:
    """Pull the task, then refuse its FAB or run the site's own ClientApp on its message; the reply
    is pushed whatever happened, unless the site signed a stop (then the run is over for it)."""
    from logging import ERROR

    from flwr.app import Error, Message
    from flwr.common.constant import ErrorCode, SubStatus
    from flwr.supercore import log
    from flwr.supercore.exit import ExitCode
    from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
    from flwr.supernode.runtime.run_clientapp import pull_task_input, push_message

    task: dict[str, Any] = {}  # what the site's signed stop needs, filled in as it is known
    with signed_site_stops(task):
        try:
            state.heartbeat = HeartbeatSender(make_task_heartbeat_fn_http(client))
            state.heartbeat.start()
            state.message, state.context, run, fab = pull_task_input(client)
            sha = fab_sha256(fab.content)  # from the bytes; fab.hash_str is what the server says
            node = dict(state.context.node_config)
            run_id = str(run.run_id)
            why = refusal(node, sha)
            if why is not None:
                _refuse(state, node, run, sha, why)
            else:
                task.update(node=node, run_id=run_id, message=state.message)  # a run this site takes part in
                app = load_site_app()
                code = {"fab_sha256": sha, "package_digest": package_digest(), "version": package_version()}
                log_code(node, run_id, "code", code, close=False)
                state.reply = app(message=state.message, context=state.context)
                state.sub_status, state.details = SubStatus.COMPLETED, ""
        except Exception as ex:  # noqa: BLE001 (reported to the SuperNode as flwr-clientapp does)
            log(ERROR, "the site's ClientApp raised an exception", exc_info=ex)
            reason = f"{type(ex)}:<'{ex}'>"
            state.sub_status, state.details = SubStatus.FAILED, reason
            if state.message is not None:
                error = Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason)
                state.reply = Message(error, reply_to=state.message)
            state.exit_code = ExitCode.TASK_PROC_EXCEPTION
        finally:
            if state.reply is not None and state.context is not None and not task.get("stopped"):
                try:
                    push_message(client, state.reply, state.context)
                except Exception as ex:  # noqa: BLE001
                    log(ERROR, "Failed to push reply message", exc_info=ex)
                    state.exit_code = ExitCode.CLIENTAPP_COMMUNICATION_ERROR


def main() -> None:
    """flwr-clientapp's arguments and Runtime-API calls (Flower's functions), the site's code."""
    from flwr.common.args import try_obtain_flwr_app_token
    from flwr.common.constant import SubStatus
    from flwr.supercore.app_utils import start_parent_process_monitor
    from flwr.supercore.exit import ExitCode, flwr_exit, register_signal_handlers
    from flwr.supercore.retry import make_simple_http_retry_invoker
    from flwr.supercore.telemetry import EventType
    from flwr.supernode.cli.flwr_clientapp import _parse_args_run_flwr_clientapp
    from flwr.supernode.runtime.run_clientapp import push_task_output

    args = _parse_args_run_flwr_clientapp().parse_args()  # exactly flwr-clientapp's command line
    token = try_obtain_flwr_app_token(args)
    if args.parent_pid is not None:
        start_parent_process_monitor(args.parent_pid)
    retry_invoker = make_simple_http_retry_invoker()
    client = _runtime_client(args, token, retry_invoker)
    state = _Task(sub_status=SubStatus.FAILED, exit_code=ExitCode.SUCCESS)

    def on_exit() -> None:
        retry_invoker.max_tries = 1
        push_task_output(
            client=client, context=state.context, sub_status=state.sub_status, details=state.details
        )
        if state.heartbeat is not None and state.heartbeat.is_running:
            state.heartbeat.stop()
        client.close()

    register_signal_handlers(
        event_type=EventType.FLWR_CLIENTAPP_RUN_LEAVE, exit_message="Task stopped.", exit_handlers=[on_exit]
    )
    _serve_task(client, state)
    if state.refused:  # the task ends FAILED with the one line above, not Flower's "unhandled exception"
        on_exit()
        sys.exit(1)
    flwr_exit(code=state.exit_code, event_type=EventType.FLWR_CLIENTAPP_RUN_LEAVE)


if __name__ == "__main__":
    main()
