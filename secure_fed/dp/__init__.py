"""Differential privacy for secure_fed: event algebra, accountants, ledger, calibration, mechanisms.

Knows nothing of FedTAR or Flower: it takes numbers, arrays, events and torch modules.
"""

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
