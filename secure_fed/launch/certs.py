"""`secure-fed certs init`: the TLS and node-authentication material of a deployment.

A hospital network usually has its own PKI; this is the recipe for when it does not (and for the
local example): a CA, a SuperLink certificate whose subject alternative names are exactly the
addresses the nodes dial (a certificate for "localhost" does not verify a dial to 127.0.0.1), and
one ECDSA P-384 key pair per SuperNode in OpenSSH format, as Flower's SuperNode authentication wants
(`ssh-keygen -t ecdsa -b 384` makes the same). Private keys are written 0600; nothing is overwritten
unless asked.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT, CA_KEY = "ca.crt", "ca.key"
LINK_CERT, LINK_KEY = "superlink.pem", "superlink.key"
DEFAULT_HOSTS = ("127.0.0.1", "localhost")


class CertsError(ValueError):
    """A certificate request we refuse (existing files, a bad host name)."""


@dataclass(frozen=True)
class CertKit:
    ca: Path
    ca_key: Path
    cert: Path
    key: Path
    nodes: dict[str, tuple[Path, Path]]  # node name → (private key, public key)


def _write(path: Path, data: bytes, private: bool) -> None:
    # a private key is never readable by others, not even for the moment before a chmod
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    if private:
        path.chmod(0o600)


def _san(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            if not host or any(c in host for c in " /:@"):
                raise CertsError(f"--host {host!r}: not an IP address or a DNS name") from None
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


MAX_DAYS = 3650


def node_key_paths(out: Path, node: str) -> tuple[Path, Path]:
    return out / f"{node}-node.key", out / f"{node}-node.pub"


def init_certs(
    out: Path,
    hosts: Sequence[str] = DEFAULT_HOSTS,
    nodes: Sequence[str] = (),
    days: int = 365,
    force: bool = False,
) -> CertKit:
    """CA + SuperLink certificate (SAN = `hosts`) + one OpenSSH ECDSA key pair per node."""
    if not hosts:
        raise CertsError("--host: name at least one address the nodes dial (an IP or a DNS name)")
    from secure_fed.crypto.keys import PARTY_NAME  # node names are party names, and name files too

    bad = [n for n in nodes if not PARTY_NAME.match(n)]
    if bad:
        # a name becomes a file name in `out`: "../x" would write a key outside it
        raise CertsError(f"--nodes {bad[0]!r}: use letters, digits, '.', '_' and '-' (e.g. site0)")
    if not 1 <= days <= MAX_DAYS:
        raise CertsError(f"--days {days}: give a validity between 1 and {MAX_DAYS} days")
    out = Path(out)
    node_files = {n: node_key_paths(out, n) for n in nodes}
    targets = [out / CA_CERT, out / CA_KEY, out / LINK_CERT, out / LINK_KEY]
    targets += [p for pair in node_files.values() for p in pair]
    existing = [p.name for p in targets if p.exists()]
    if existing and not force:
        raise CertsError(f"{out}: {', '.join(existing)} exist already; pass --force to replace them")
    san = _san(hosts)
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "secure_fed deployment CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA384())
    )
    link_key = ec.generate_private_key(ec.SECP384R1())
    link_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(link_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(san, critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA384())
    )
    pkcs8 = serialization.PrivateFormat.PKCS8
    plain = serialization.NoEncryption()
    _write(out / CA_CERT, ca_cert.public_bytes(serialization.Encoding.PEM), private=False)
    _write(out / CA_KEY, ca_key.private_bytes(serialization.Encoding.PEM, pkcs8, plain), private=True)
    _write(out / LINK_CERT, link_cert.public_bytes(serialization.Encoding.PEM), private=False)
    _write(out / LINK_KEY, link_key.private_bytes(serialization.Encoding.PEM, pkcs8, plain), private=True)
    for private, public in node_files.values():
        key = ec.generate_private_key(ec.SECP384R1())
        openssh = serialization.PrivateFormat.OpenSSH
        _write(private, key.private_bytes(serialization.Encoding.PEM, openssh, plain), private=True)
        _write(
            public,
            key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
            + b"\n",
            private=False,
        )
    return CertKit(out / CA_CERT, out / CA_KEY, out / LINK_CERT, out / LINK_KEY, node_files)
