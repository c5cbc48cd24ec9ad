"""Hash-chained, signed audit logs; their verifier (with an independent ε accountant); the report."""

# The names load on first use (PEP 562): the report draws with matplotlib and the verifier prices
# with Opacus, and a site that only appends to its log imports this package too.

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
    "secure_fed.audits.report": (
        "report_main",
        "write_report",
    ),
    "secure_fed.audits.verify": (
        "Problem",
        "Verification",
        "verify_logs",
    ),
    "secure_fed.audits.verify_console": ("verify_main",),
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _NAMES)
