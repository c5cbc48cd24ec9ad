"""The verifier: a run's signed logs checked whole, every ε re-derived by a second accountant, the
verdict and the compliance report. It imports only the log contract (secure_fed.audits)."""

# The names load on first use (PEP 562): the report draws with matplotlib and the verifier prices
# with dp_accounting.

from __future__ import annotations

from secure_fed.facade import lazy_names

# each module and the names the façade takes from it
_NAMES: dict[str, tuple[str, ...]] = {
    "secure_fed.verifier.report": (
        "report_main",
        "write_report",
    ),
    "secure_fed.verifier.verify": (
        "Problem",
        "Verification",
        "verify_logs",
    ),
    "secure_fed.verifier.verify_console": ("verify_main",),
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _NAMES)
