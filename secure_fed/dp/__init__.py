"""Differential privacy for secure_fed: event algebra, accountants, ledger, calibration, mechanisms.

Knows nothing of FedTAR or Flower: it takes numbers, arrays, events and torch modules.
"""

# The façade's names load on first use (PEP 562): importing any module of the package runs this
# file, and the mechanisms behind these names import torch and Opacus, which a process that only
# reads events or keys (a verifier, a node's crypto phase) should not pay for.

from __future__ import annotations

from typing import TYPE_CHECKING

from secure_fed.facade import lazy_names

# name -> the module that defines it
_WHERE: dict[str, str] = {
    "Admission": "secure_fed.dp.budget",
    "BudgetGuard": "secure_fed.dp.budget",
    "BudgetSplit": "secure_fed.dp.calibration",
    "CalibrationError": "secure_fed.dp.calibration",
    "Composed": "secure_fed.dp.events",
    "Event": "secure_fed.dp.events",
    "EventFormatError": "secure_fed.dp.events",
    "Gaussian": "secure_fed.dp.events",
    "HistogramBins": "secure_fed.dp.histogram",
    "LedgerEntry": "secure_fed.dp.ledger",
    "LedgerError": "secure_fed.dp.ledger",
    "NoiseKeyError": "secure_fed.dp.private_files",
    "NoiseStream": "secure_fed.dp.keystream",
    "PatientDPSGD": "secure_fed.dp.dpsgd",
    "PoissonSampledGaussian": "secure_fed.dp.events",
    "PrivacyLedger": "secure_fed.dp.ledger",
    "PrvResult": "secure_fed.dp.accountants",
    "StepStats": "secure_fed.dp.dpsgd",
    "atomic_write_bytes": "secure_fed.dp.private_files",
    "calibrate_gaussian": "secure_fed.dp.calibration",
    "calibrate_noise": "secure_fed.dp.calibration",
    "check_delta": "secure_fed.dp.calibration",
    "check_modules": "secure_fed.dp.dpsgd",
    "clip_and_noise_sum": "secure_fed.dp.clipped_sum",
    "clipped_sum_event": "secure_fed.dp.clipped_sum",
    "default_delta": "secure_fed.dp.calibration",
    "epsilon_prv": "secure_fed.dp.accountants",
    "epsilon_rdp": "secure_fed.dp.accountants",
    "from_json": "secure_fed.dp.events",
    "gaussian_histogram": "secure_fed.dp.histogram",
    "histogram_event": "secure_fed.dp.histogram",
    "load_or_create_noise_key": "secure_fed.dp.private_files",
    "persisted_gaussian_histogram": "secure_fed.dp.histogram",
    "poisson_sample": "secure_fed.dp.dpsgd",
    "prv_epsilon": "secure_fed.dp.accountants",
    "release_key": "secure_fed.dp.keystream",
    "sample_from_histogram": "secure_fed.dp.histogram",
    "split_budget": "secure_fed.dp.calibration",
}

if TYPE_CHECKING:
    from secure_fed.dp.accountants import PrvResult, epsilon_prv, epsilon_rdp, prv_epsilon
    from secure_fed.dp.budget import Admission, BudgetGuard
    from secure_fed.dp.calibration import (
        BudgetSplit,
        CalibrationError,
        calibrate_gaussian,
        calibrate_noise,
        check_delta,
        default_delta,
        split_budget,
    )
    from secure_fed.dp.clipped_sum import clip_and_noise_sum, clipped_sum_event
    from secure_fed.dp.dpsgd import PatientDPSGD, StepStats, check_modules, poisson_sample
    from secure_fed.dp.events import (
        Composed,
        Event,
        EventFormatError,
        Gaussian,
        PoissonSampledGaussian,
        from_json,
    )
    from secure_fed.dp.histogram import (
        HistogramBins,
        gaussian_histogram,
        histogram_event,
        persisted_gaussian_histogram,
        sample_from_histogram,
    )
    from secure_fed.dp.keystream import NoiseStream, release_key
    from secure_fed.dp.ledger import LedgerEntry, LedgerError, PrivacyLedger
    from secure_fed.dp.private_files import NoiseKeyError, atomic_write_bytes, load_or_create_noise_key

__all__ = [
    "Admission",
    "BudgetGuard",
    "BudgetSplit",
    "CalibrationError",
    "Composed",
    "Event",
    "EventFormatError",
    "Gaussian",
    "HistogramBins",
    "LedgerEntry",
    "LedgerError",
    "NoiseKeyError",
    "NoiseStream",
    "PatientDPSGD",
    "PoissonSampledGaussian",
    "PrivacyLedger",
    "PrvResult",
    "StepStats",
    "atomic_write_bytes",
    "calibrate_gaussian",
    "calibrate_noise",
    "check_delta",
    "check_modules",
    "clip_and_noise_sum",
    "clipped_sum_event",
    "default_delta",
    "epsilon_prv",
    "epsilon_rdp",
    "from_json",
    "gaussian_histogram",
    "histogram_event",
    "load_or_create_noise_key",
    "persisted_gaussian_histogram",
    "poisson_sample",
    "prv_epsilon",
    "release_key",
    "sample_from_histogram",
    "split_budget",
]


__getattr__, __dir__ = lazy_names(__name__, _WHERE)
