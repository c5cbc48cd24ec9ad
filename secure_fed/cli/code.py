"""`secure-fed code`: review a run's FAB against the site's installed code, pin (approve) its hash."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from secure_fed.cli.common import (
    Commands,
    fail,
    read_config,
)

code_app = typer.Typer(
    cls=Commands,
    no_args_is_help=True,
    help="The code a deployed site runs: review a run's FAB, approve (pin) its hash.",
)


def _approvals_of(config: Path) -> Path:
    policy = read_config(config, {})
    if policy.deploy.approved_fabs is None:
        fail(f"{config}: [deploy] approved_fabs is not set: name the file that pins the FABs it approves")
    return Path(str(policy.deploy.approved_fabs))


@code_app.command("review")
def code_review(
    fab: Annotated[Path, typer.Argument(help="the run's FAB (`flwr build` makes it from the project)")],
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="the site's policy: also say whether it is approved")
    ] = None,
) -> None:
    """List the FAB's files against the site's installed secure_fed and print its SHA-256.

    The node never runs the FAB's code: for an approved FAB it runs the site's installed package.
    Files that differ show where the coordinator's release and this site's install part.
    """
    from secure_fed.launch.approved_app import ApprovalError, approved_hashes, package_digest, review_fab

    try:
        found = review_fab(fab)
        pinned = approved_hashes(_approvals_of(config)) if config is not None else None
    except ApprovalError as err:
        fail(str(err))
    for name, status in found.files:
        typer.echo(f"  {status:<26} {name}")
    for name in found.missing:
        typer.echo(f"  {'missing from the FAB':<26} {name}")
    differ = sum(status != "same" for _, status in found.files if status != "not code") + len(found.missing)
    typer.echo(f"{len(found.files)} files; {differ} differ from the site's installed secure_fed")
    typer.echo(f"installed package digest {package_digest()} (the code the node runs)")
    state = "" if pinned is None else (" (approved)" if found.sha256 in pinned else " (not approved)")
    typer.echo(f"FAB sha256 {found.sha256}{state}")


@code_app.command("approve")
def code_approve(
    fab: Annotated[Path, typer.Argument(help="the FAB reviewed with `secure-fed code review`")],
    config: Annotated[Path, typer.Option("--config", "-c", help="the site's policy: [deploy] approved_fabs")],
    note: Annotated[str, typer.Option(help="why, e.g. the release or ticket it belongs to")] = "",
    by: Annotated[str | None, typer.Option(help="who approves (default: the login name)")] = None,
) -> None:
    """Pin the FAB's SHA-256 in the site's approval list: the node runs runs of it, and no other.

    Example: secure-fed code approve secure-fed.secure-fed.0-1-0.1a2b3c4d.fab --config site0.toml
    """
    import getpass

    from secure_fed.launch.approved_app import ApprovalError, approve_fab

    approvals = _approvals_of(config)
    try:
        sha, added = approve_fab(approvals, fab, by or getpass.getuser(), note)
    except ApprovalError as err:
        fail(str(err))
    typer.echo(f"{approvals}: FAB sha256 {sha} {'approved' if added else 'was already approved'}")
