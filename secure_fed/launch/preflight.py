"""A hospital node's start-up checks: everything `secure-fed client` can find wrong in seconds, so
that an operator learns of a typo in a path before a SuperNode, Flower or a pretraining run starts,
not minutes later in a ClientApp's log. Each problem is one line naming the file or key and the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

from secure_fed.config import RunConfig

_KEYS_HINT = (
    "make this site's kit with `secure-fed keys new --party SITE --out KEYS`, then "
    "`secure-fed keys assemble --keys KEYS --public PUBLISHED --expect parties.json` (docs/DEPLOYMENT.md)"
)


class PreflightError(ValueError):
    """One start-up problem, said in one line."""


def manifest_sites(path: Path) -> set[str]:
    """The sites a manifest names, read line by line without loading images (fast on any size)."""
    sites: set[str] = set()
    with path.open() as lines:
        for line in lines:
            if line.strip():
                try:
                    sites.add(str(json.loads(line).get("site", "")))
                except (json.JSONDecodeError, AttributeError):
                    continue  # `secure-fed data check` names malformed lines; here only the sites matter
    return sites


def check_site_name(cfg: RunConfig, site: str, config_path: Path) -> None:
    if cfg.data.source == "synthetic":
        known = {f"site{k}" for k in range(cfg.data.synth.sites)}
        where = f"{config_path}: [data.synth] sites = {cfg.data.synth.sites}"
    else:
        data_path = Path(str(cfg.data.path))
        if not data_path.exists():
            raise PreflightError(f"{config_path}: data.path {data_path.resolve()} does not exist")
        if cfg.data.source != "manifest":
            return  # an annotation file names its sites inside its own structure; the load checks it
        known = manifest_sites(data_path)
        where = f"{data_path.resolve()}"
    if site not in known:
        raise PreflightError(
            f"--site {site!r} is not a site of {where} (sites: {', '.join(sorted(known)) or 'none'})"
        )


def check_keys(cfg: RunConfig, site: str, keys: Path | None) -> None:
    needs_signing = cfg.audit.enabled or cfg.secagg_on or cfg.he.enabled
    if keys is None:
        if needs_signing:
            raise PreflightError(
                f"--keys is required: site {site} signs its audit log and its SecAgg+/CKKS keys with "
                f"KEYS/signing/{site}.pem ({_KEYS_HINT})"
            )
        return
    if not keys.is_dir():
        raise PreflightError(f"--keys {keys.resolve()}: no such folder ({_KEYS_HINT})")
    if needs_signing:
        own = keys / "signing" / f"{site}.pem"
        if not own.is_file():
            raise PreflightError(
                f"--keys {keys.resolve()}: no signing key for {site} ({own.name}); {_KEYS_HINT}"
            )
        if not (keys / "fingerprints.json").is_file():
            raise PreflightError(f"--keys {keys.resolve()}: fingerprints.json is missing; {_KEYS_HINT}")
        from secure_fed.crypto.keys import KeyMaterialError, kit_coordinator

        try:
            coordinator = kit_coordinator(keys)
        except KeyMaterialError as err:  # a kit without exactly one would count the server as a site
            raise PreflightError(f"--keys: {err}") from None
        if coordinator == site:
            raise PreflightError(
                f"--keys {keys.resolve()}: {site} is the kit's coordinator (it runs the server), not a "
                "site; start the node with its own site's kit"
            )
    if cfg.he.enabled:
        he_dir = Path(str(cfg.he.keys_dir))
        secret = he_dir / "he" / "secret.tenseal"
        if not secret.is_file():
            raise PreflightError(
                f"[he] keys_dir = {he_dir.resolve()}: no CKKS secret context (he/secret.tenseal); "
                "a site needs the kit's secret context to decrypt α"
            )


def check_certificate(path: Path, flag: str = "--root-certificates") -> None:
    from cryptography import x509

    if not path.is_file():
        raise PreflightError(f"{flag} {path.resolve()}: no such file")
    try:
        x509.load_pem_x509_certificates(path.read_bytes())
    except ValueError:
        raise PreflightError(
            f"{flag} {path.resolve()}: not a PEM certificate (expected the CA's ca.crt from "
            "`secure-fed certs init`)"
        ) from None


def check_node(
    cfg: RunConfig,
    config_path: Path,
    site: str,
    keys: Path | None,
    root_certificates: Path | None,
    auth_key: Path | None,
) -> None:
    """Every check `secure-fed client` makes before it starts anything; raises the first problem."""
    check_site_name(cfg, site, config_path)
    check_keys(cfg, site, keys)
    if root_certificates is not None:
        check_certificate(root_certificates)
    if auth_key is not None and not auth_key.is_file():
        raise PreflightError(
            f"--auth-key {auth_key.resolve()}: no such file (make one with "
            "`ssh-keygen -t ecdsa -b 384 -N '' -f NODE`)"
        )
    if auth_key is not None and b"PRIVATE KEY-----" not in auth_key.read_bytes()[:200]:
        raise PreflightError(
            f"--auth-key {auth_key.resolve()}: not a private key; give NODE.key (its NODE.pub is what "
            "`flwr supernode register` takes)"
        )


def check_connection(
    superlink: str, runtime_port: int, insecure: bool, root_certificates: Path | None
) -> None:
    """The node's flags, checked before the caches fill: Flower would find them out only when it dials."""
    host, colon, port = superlink.rpartition(":")
    if not colon or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise PreflightError(
            f"--superlink {superlink!r}: give the SuperLink's host:port (e.g. link.hospital.net:9092)"
        )
    if not 1 <= runtime_port <= 65535:
        raise PreflightError(
            f"--runtime-port {runtime_port}: give a free local port in 1..65535 (default 9094)"
        )
    if insecure and root_certificates is not None:
        # Flower would take --insecure and drop the CA without a word: TLS off by accident
        raise PreflightError(
            "--insecure and --root-certificates contradict each other: drop --insecure to dial with TLS"
        )


def prepare_site(cfg: RunConfig, site: str) -> None:
    """Fill the caches the node's first message would otherwise fill in silence: the pretrained
    base (minutes on a CPU the first time) and the site's cohort. Nothing secret is made here."""
    from secure_fed.registry import initial_state
    from secure_fed.site.site import load_site

    initial_state(cfg)
    load_site(cfg, site)
