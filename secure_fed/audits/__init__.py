"""Hash-chained, signed audit logs: the record format, the writer, the reader and the signing keys
(the contract every party writes to and the verifier reads)."""

# The names load on first use (PEP 562): a site that only appends to its log imports this package.

from __future__ import annotations

from secure_fed.facade import lazy_names

# each module and the names the façade takes from it
_NAMES: dict[str, tuple[str, ...]] = {
    "secure_fed.audits.keys": (
        "load_private_key",
        "load_public_keys",
    ),
    "secure_fed.audits.log": (
        "AuditLog",
        "AuditLogError",
        "EVENTS",
    ),
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _NAMES)
