"""Hash-chained, signed audit logs; their verifier (with an independent ε accountant); the report."""

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
