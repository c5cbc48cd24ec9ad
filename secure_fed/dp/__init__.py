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
from secure_fed.dp.dpsgd import PatientDPSGD, StepStats, poisson_sample
from secure_fed.dp.events import (
    Composed,
    Event,
    EventFormatError,
    Gaussian,
    PoissonSampledGaussian,
    from_json,
)
from secure_fed.dp.histogram import HistogramBins, gaussian_histogram, histogram_event, sample_from_histogram
from secure_fed.dp.ledger import LedgerEntry, LedgerError, PrivacyLedger

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
    "PatientDPSGD",
    "PoissonSampledGaussian",
    "PrivacyLedger",
    "PrvResult",
    "StepStats",
    "calibrate_gaussian",
    "calibrate_noise",
    "check_delta",
    "clip_and_noise_sum",
    "clipped_sum_event",
    "default_delta",
    "epsilon_prv",
    "epsilon_rdp",
    "from_json",
    "gaussian_histogram",
    "histogram_event",
    "poisson_sample",
    "prv_epsilon",
    "sample_from_histogram",
    "split_budget",
]
