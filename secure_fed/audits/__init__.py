"""Hash-chained, signed audit logs; their verifier (with an independent ε accountant); the report."""

# The names load on first use (PEP 562): the report draws with matplotlib and the verifier prices
# with Opacus, and a site that only appends to its log imports this package too.

from __future__ import annotations

from typing import TYPE_CHECKING

from secure_fed.facade import lazy_names

# name -> the module that defines it
_WHERE: dict[str, str] = {
    "AuditLog": "secure_fed.audits.log",
    "AuditLogError": "secure_fed.audits.log",
    "EVENTS": "secure_fed.audits.log",
    "Problem": "secure_fed.audits.verify",
    "Verification": "secure_fed.audits.verify",
    "load_private_key": "secure_fed.audits.keys",
    "load_public_keys": "secure_fed.audits.keys",
    "report_main": "secure_fed.audits.report",
    "verify_logs": "secure_fed.audits.verify",
    "verify_main": "secure_fed.audits.verify",
    "write_report": "secure_fed.audits.report",
}

if TYPE_CHECKING:
    from secure_fed.audits.keys import load_private_key, load_public_keys
    from secure_fed.audits.log import EVENTS, AuditLog, AuditLogError
    from secure_fed.audits.report import report_main, write_report
    from secure_fed.audits.verify import Problem, Verification, verify_logs, verify_main

__all__ = [
    "EVENTS",
    "AuditLog",
    "AuditLogError",
    "Problem",
    "Verification",
    "load_private_key",
    "load_public_keys",
    "report_main",
    "verify_logs",
    "verify_main",
    "write_report",
]


__getattr__, __dir__ = lazy_names(__name__, _WHERE)
