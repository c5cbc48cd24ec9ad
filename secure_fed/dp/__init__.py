"""Differential privacy for secure_fed: event algebra, accountants, ledger, calibration, mechanisms.

Knows nothing of FedTAR or Flower: it takes numbers, arrays, events and torch modules.
"""

# The façade's names load on first use (PEP 562): importing any module of the package runs this
# file, and the mechanisms behind these names import torch and Opacus, which a process that only
# reads events or keys (a verifier, a node's crypto phase) should not pay for.

from __future__ import annotations

from secure_fed.facade import lazy_names

# each module and the names the façade takes from it
_NAMES: dict[str, tuple[str, ...]] = {
    "secure_fed.dp.accountants": (
        "ACCOUNTANTS",
        "PRV",
        "RDP",
        "Accountant",
        "PrvAccountant",
        "PrvResult",
        "RdpAccountant",
        "accountant_named",
        "epsilon_prv",
        "epsilon_rdp",
        "prv_epsilon",
    ),
    "secure_fed.dp.budget": (
        "Admission",
        "BudgetGuard",
    ),
    "secure_fed.dp.calibration": (
        "BudgetSplit",
        "CalibrationError",
        "calibrate_gaussian",
        "calibrate_noise",
        "check_delta",
        "default_delta",
        "split_budget",
    ),
    "secure_fed.dp.clipped_sum": (
        "clip_and_noise_sum",
        "clipped_sum_event",
    ),
    "secure_fed.dp.dpsgd": (
        "PatientDPSGD",
        "StepStats",
        "check_modules",
        "poisson_sample",
    ),
    "secure_fed.dp.events": (
        "Composed",
        "Event",
        "EventFormatError",
        "Gaussian",
        "PoissonSampledGaussian",
        "from_json",
    ),
    "secure_fed.dp.histogram": (
        "HistogramBins",
        "gaussian_histogram",
        "histogram_event",
        "persisted_gaussian_histogram",
        "sample_from_histogram",
    ),
    "secure_fed.dp.keystream": (
        "NoiseStream",
        "release_key",
    ),
    "secure_fed.dp.ledger": (
        "LedgerEntry",
        "LedgerError",
        "PrivacyLedger",
    ),
    "secure_fed.dp.private_files": (
        "NoiseKeyError",
        "atomic_write_bytes",
        "load_or_create_noise_key",
    ),
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _NAMES)
