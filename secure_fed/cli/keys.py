"""`secure-fed keys` and `secure-fed certs`: a federation's keys (all at once, or by ceremony,
each party making its own) and a deployment's TLS certificates and SuperNode keys."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from secure_fed.cli.common import (
    Commands,
    console,
    fail,
)

keys_app = typer.Typer(cls=Commands, no_args_is_help=True, help="Provision keys.")
certs_app = typer.Typer(
    cls=Commands, no_args_is_help=True, help="TLS certificates and SuperNode keys for a deployment."
)


@keys_app.command("init")
def keys_init(
    out: Annotated[Path, typer.Option("--out", "-o", help="key folder to create")],
    sites: Annotated[int, typer.Option(help="number of sites (site0..)")] = 3,
    parties: Annotated[
        str | None, typer.Option(help="comma-separated party names (overrides --sites)")
    ] = None,
    force: Annotated[bool, typer.Option(help="replace existing keys")] = False,
    coordinator: Annotated[
        str, typer.Option(help="the party that runs the server (one of the parties; never a SecAgg+ peer)")
    ] = "server",
) -> None:
    """CKKS contexts (secret for sites, public for the server), Ed25519 signing keys, fingerprints.

    Example: secure-fed keys init --out keys --sites 3
    """
    from secure_fed.crypto.keys import keys_init_main

    if parties is not None:
        names = [p.strip() for p in parties.split(",") if p.strip()]
        if len(names) < 2:
            fail(
                f"--parties {parties!r}: name the server and at least one site, "
                "e.g. --parties server,site0,site1"
            )
    elif sites < 1:
        fail(f"--sites {sites}: a federation needs at least one site")
    else:
        names = ["server", *(f"site{k}" for k in range(sites))]
    raise typer.Exit(keys_init_main(out, names, force, coordinator))


def _ceremony(step: Any, *args: Any) -> Any:
    from secure_fed.crypto.keys import KeyMaterialError

    try:
        return step(*args)
    except (KeyMaterialError, ValueError) as err:
        fail(str(err))


@keys_app.command("new")
def keys_new(
    party: Annotated[str, typer.Option(help="this party's name: server, or the site's name")],
    out: Annotated[Path, typer.Option("--out", "-o", help="this party's own key folder")],
) -> None:
    """Make this party's signing key on its own machine; publish only signing/PARTY.pub.

    Example: secure-fed keys new --party site0 --out site0-keys
    """
    from secure_fed.crypto.key_ceremony import new_signing_key

    fingerprint = _ceremony(new_signing_key, out, party)
    typer.echo(f"{party}: {out / 'signing' / (party + '.pem')} stays here (0600)")
    typer.echo(f"{party}: publish {out / 'signing' / (party + '.pub')}  sha256 {fingerprint}")


@keys_app.command("he-init")
def keys_he_init(
    out: Annotated[Path, typer.Option("--out", "-o", help="the CKKS key holder's (a site's) key folder")],
) -> None:
    """Make the CKKS contexts, at one site: he/secret.tenseal goes to the other sites only.

    Example: secure-fed keys he-init --out site0-keys
    """
    from secure_fed.crypto.key_ceremony import new_he_context

    fingerprint = _ceremony(new_he_context, out)
    secret = out / "he" / "secret.tenseal"
    typer.echo(f"{secret}: give to every other site over its own channel, never to the server")
    typer.echo(f"{out / 'he' / 'public.tenseal'}: publish  sha256 {fingerprint}")


@keys_app.command("assemble")
def keys_assemble(
    keys: Annotated[Path, typer.Option(help="this party's key folder")],
    public: Annotated[
        Path, typer.Option(help="folder of every party's published .pub and he/public.tenseal")
    ],
    expect: Annotated[
        Path,
        typer.Option(
            help="parties.json agreed out of band, not via the server: "
            '{"he_public": sha256, "signing": {party: sha256}, "coordinator": party} as keys new / '
            "he-init printed them, the coordinator being the party that runs the server"
        ),
    ],
    expect_digest: Annotated[
        str | None,
        typer.Option(help="the ceremony digest the parties agreed on; refused if these keys give another"),
    ] = None,
) -> None:
    """Pin exactly the expected parties' published keys and the CKKS public context in this kit.

    Example: secure-fed keys assemble --keys site0-keys --public published --expect parties.json
    """
    from secure_fed.crypto.key_ceremony import assemble, ceremony_digest, load_expectation

    expected = _ceremony(load_expectation, expect)
    fingerprints = _ceremony(assemble, keys, public, expected, expect_digest)
    typer.echo(f"{keys / 'fingerprints.json'}: he_public {fingerprints['he_public']}")
    for party, fingerprint in fingerprints["signing"].items():
        typer.echo(f"  {party}  {fingerprint}")
    typer.echo(f"  coordinator {fingerprints['coordinator']}  (runs the server; never counted as a site)")
    typer.echo(f"ceremony digest {ceremony_digest(fingerprints)}")
    typer.echo("  compare it with every other party out of band (a call, a letter): all must read the same")


@keys_app.command("export-public")
def keys_export_public(
    keys: Annotated[Path, typer.Option(help="a key folder (kept private)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="folder to publish or give a verifier")],
) -> None:
    """Copy only the public part of a kit: .pub keys, he/public.tenseal, fingerprints.json.

    Example: secure-fed keys export-public --keys keys --out public-keys
    """
    from secure_fed.crypto.key_ceremony import export_public

    for path in _ceremony(export_public, keys, out):
        typer.echo(str(path))


@certs_app.command("init")
def certs_init(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="folder for ca.crt, superlink.pem/.key, node keys")
    ],
    host: Annotated[
        list[str] | None,
        typer.Option(help="an address the nodes dial, repeatable (the certificate's SAN)"),
    ] = None,
    nodes: Annotated[
        str, typer.Option(help="comma-separated node names: one OpenSSH ECDSA key pair each (NAME-node.key)")
    ] = "",
    days: Annotated[int, typer.Option(help="validity in days")] = 365,
    force: Annotated[bool, typer.Option(help="replace existing files")] = False,
) -> None:
    """A CA, a SuperLink certificate naming the dialled addresses, and SuperNode key pairs.

    Example: secure-fed certs init --out certs --host 127.0.0.1 --host localhost --nodes site0,site1,site2
    """
    from secure_fed.launch.certs import DEFAULT_HOSTS, CertsError, init_certs

    names = [n.strip() for n in nodes.split(",") if n.strip()]
    try:
        kit = init_certs(out, host or list(DEFAULT_HOSTS), names, days, force)
    except CertsError as err:
        fail(str(err))
        raise
    console.print(
        f"wrote {kit.ca} (give to every node and to `flwr`), {kit.cert} + {kit.key} (SuperLink only)"
    )
    for name, (private, public) in kit.nodes.items():
        console.print(f"wrote {private} ({name} only) and {public} (`flwr supernode register`)")
