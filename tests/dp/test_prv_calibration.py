"""dp.accountant = "prv": calibration solves σ with the tight accountant, the budget guard enforces
it, every privacy record logs both values and the verifier's own PLD re-derives the PRV one.

Pinned at the hospital recipe before benchmarks/dp_tune.py chose configs/hospital-scale.toml's:
ε = 8, δ = 1e-5, Poisson rate 0.1, 5 rounds × 10 steps (site mode; the pooled `central` takes the
same 50 steps), the GMM histogram getting 10 % of ε."""

from __future__ import annotations

import json

import pytest

from secure_fed.config import build_config
from secure_fed.dp.calibration import epsilon_of, split_budget
from secure_fed.dp.events import PoissonSampledGaussian
from secure_fed.dp.histogram import histogram_event
from secure_fed.site.private import TRAIN, SitePrivacy
from secure_fed.verifier.accounting import StreamAccountant, prv_matches

TARGET, DELTA, Q = 8.0, 1e-5, 0.1


def _hospital_split(accountant: str):
    return split_budget(
        TARGET, DELTA, sampling_rate=Q, rounds=5, steps_per_round=10, gmm_fraction=0.1,
        accountant=accountant,  # type: ignore[arg-type]
    )  # fmt: skip


@pytest.mark.slow  # calibrates at the hospital recipe's size: make test-fast leaves it out
def test_prv_calibrates_less_noise_than_rdp_at_the_hospital_recipe() -> None:
    rdp, prv = _hospital_split("rdp"), _hospital_split("prv")
    assert rdp.dpsgd_noise_multiplier == pytest.approx(0.863, abs=5e-4)
    assert prv.dpsgd_noise_multiplier == pytest.approx(0.809, abs=5e-4)
    # the histogram's share is priced exactly (analytic Gaussian) either way
    assert prv.gmm_noise_multiplier == rdp.gmm_noise_multiplier
    for split, accountant in ((rdp, "rdp"), (prv, "prv")):
        assert TARGET * 0.99 <= epsilon_of(list(split.planned_events), DELTA, accountant) <= TARGET  # type: ignore[arg-type]
    # why the guard must enforce the accountant σ was solved with: RDP prices the PRV plan above 8
    assert epsilon_of(list(prv.planned_events), DELTA, "rdp") > TARGET + 1


@pytest.mark.slow
def test_dp_sgd_alone_pins_both_accountants() -> None:
    # the DP-SGD steps alone (no histogram): 50 steps at q = 0.1
    sigma = {a: split_budget(TARGET, DELTA, sampling_rate=Q, rounds=50, steps_per_round=1,
                             gmm_fraction=None, accountant=a, tolerance=1e-4).dpsgd_noise_multiplier  # type: ignore[arg-type]
             for a in ("rdp", "prv")}  # fmt: skip
    assert sigma["rdp"] == pytest.approx(0.857, abs=5e-4)
    assert sigma["prv"] == pytest.approx(0.804, abs=5e-4)


@pytest.mark.slow  # a site's private rounds: make test-fast leaves it out
def test_a_prv_site_spends_its_rounds_within_budget_and_the_verifier_rederives_it() -> None:
    cfg = build_config(
        {
            "fed": {"rounds": 5, "method": "fedavg"},
            "train": {"local_epochs": 1},
            "dp": {"enabled": True, "target_epsilon": TARGET, "delta": DELTA, "sample_rate": Q,
                   "accountant": "prv"},
        }
    )  # fmt: skip
    site = SitePrivacy.plan(cfg, "site0", n_train=2800, n_val=400, noise_key=bytes(32), alpha=False)
    assert site.accountant == "prv" and site.sigma == pytest.approx(0.809, abs=5e-4)
    logged: list[dict] = []

    class Trail:
        def privacy(self, round_id, population, mechanism, event, delta, eps, budget, extra):  # noqa: ANN001
            logged.append({"population": population, "event": event.to_json(), "epsilon": eps})

    site.trail = Trail()
    site.record_gmm(histogram_event(site.histogram_sigma))
    for round_id in range(1, 6):
        assert site.admit_round(round_id).ok, round_id
    last = logged[-1]["epsilon"]
    assert last["prv"] <= TARGET < last["rdp"]  # admitted by PRV; RDP alone would have refused
    stream = StreamAccountant()
    for record in logged:
        stream.compose(record["event"])
    assert prv_matches(last["prv"], stream.epsilon_pld(DELTA))
    assert json.dumps(logged)  # the records are plain JSON


def test_prv_round_event_is_the_calibrated_sampled_gaussian() -> None:
    cfg = build_config(
        {
            "fed": {"rounds": 5, "method": "fedavg"},
            "train": {"local_epochs": 1},
            "dp": {"enabled": True, "target_epsilon": TARGET, "delta": DELTA, "sample_rate": Q,
                   "accountant": "prv"},
        }
    )  # fmt: skip
    site = SitePrivacy.plan(cfg, "site0", n_train=2800, n_val=400, noise_key=bytes(32), alpha=False)
    ((mechanism, event),) = site.round_events()[TRAIN]
    assert mechanism == "dp_sgd" and event == PoissonSampledGaussian(Q, site.sigma, 10)


def test_a_cell_reports_as_spent_what_its_own_accountant_enforced() -> None:
    from secure_fed.lab.cells import spent_per_site

    assert spent_per_site({"accountant": "prv", "epsilon": {"pooled": {"rdp": 9.15, "prv": 7.96}}}) == [7.96]
    # a cell from before the key, or an RDP run: RDP, as the guard enforced
    assert spent_per_site({"epsilon": {"site0": {"rdp": 3.0, "prv": 2.5}}}) == [3.0]
    # PRV not computable: the guard fell back to RDP, and so does the table
    assert spent_per_site({"accountant": "prv", "epsilon": {"site0": {"rdp": 3.0, "prv": None}}}) == [3.0]
