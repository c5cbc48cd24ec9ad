"""`secure-fed`: thin command line over the packages. Each command parses its options and hands
them to its room: run.py (`run`), client.py (`client`), data.py, keys.py (keys and certs),
audit.py (audit and ledger), lower_bound.py (`lower-bound`), code.py; common.py holds what they share."""

from __future__ import annotations

import shlex
import sys

import typer

from secure_fed.cli.audit import audit_app, ledger_app
from secure_fed.cli.client import client
from secure_fed.cli.code import code_app
from secure_fed.cli.common import Commands, console, fail
from secure_fed.cli.data import data_app
from secure_fed.cli.keys import certs_app, keys_app
from secure_fed.cli.lower_bound import lower_bound
from secure_fed.cli.run import run

app = typer.Typer(
    cls=Commands,
    no_args_is_help=True,
    add_completion=False,
    # A crash report must not print local variables: they can hold key material and patient data.
    pretty_exceptions_show_locals=False,
    help="Privacy-hardened FedTAR: federated longitudinal report generation.",
)
# the order of the help's command list: run, client, then the groups
app.command()(run)


@app.command(
    hidden=True,
    add_help_option=False,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def sweep(ctx: typer.Context) -> None:
    """Moved: the research harness is `secure-fed-lab`, outside the code a site approves."""
    # one line, the operator's own arguments carried over: the sweeps left the package a hospital
    # reviews (secure_fed/lab, not in the FAB), and this command must not import them
    fail(
        "`secure-fed sweep` moved to the research harness, outside the code a site approves: run "
        f"`{shlex.join(['secure-fed-lab', 'sweep', *ctx.args])}` (same options)"
    )


app.command()(client)


@app.command()
def methods() -> None:
    """The registered methods (fed.method, --method), with the data each runs on."""
    from secure_fed import registry  # the algorithm folders load only for this command

    for name in registry.method_names():
        found = registry.method(name)
        notes = ["distributed DP"] if found.distributed else []
        console.print(f"{name}: {', '.join(found.kinds)}" + "".join(f"; {n}" for n in notes))


app.add_typer(data_app, name="data")
app.add_typer(keys_app, name="keys")
app.add_typer(audit_app, name="audit")
app.add_typer(certs_app, name="certs")
app.add_typer(ledger_app, name="ledger")
app.command("lower-bound")(lower_bound)
app.add_typer(code_app, name="code")

__all__ = ["app", "client", "main", "methods", "run"]


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        # `run` says how to go on itself; any other command has nothing to resume
        console.print("interrupted")
        sys.exit(130)
