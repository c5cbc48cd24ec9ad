"""A site's headline ε is one accountant's over every population that released, and names whose it
is. Under distributed DP the training step (a Skellam sum) has no PRV figure while the validation
patients' α scalars (Gaussian) have one: the site's PRV ε is then unknown, not the validation
patients' value (issue 64: a record said prv 7.39, which was the α scalars' ε alone)."""

from __future__ import annotations

import math

from secure_fed.config import build_config
from secure_fed.dp.events import Gaussian, SkellamSum, rounded_sensitivities
from secure_fed.site.private import TRAIN, VALIDATION, SitePrivacy


def _site() -> SitePrivacy:
    cfg = build_config({"fed": {"rounds": 3}, "dp": {"enabled": True, "target_epsilon": 8.0}})
    return SitePrivacy.plan(cfg, "site0", n_train=2800, n_val=400, noise_key=bytes(32))


def _skellam() -> SkellamSum:
    l2, l1 = rounded_sensitivities(1.0, 1e-3, 1024)
    return SkellamSum(0.1, 1, 1.0, 1e-3, 1000, 1024, 4.0e6, l2, l1, 32, 3, 1)


def test_no_prv_over_a_population_without_one_and_the_headline_names_its_population() -> None:
    site = _site()
    site.ledger.record("site0", TRAIN, 1, "dp_sgd", _skellam())
    site.ledger.record("site0", VALIDATION, 1, "alpha_scalars", Gaussian(2.0, 1))
    per = site.epsilon()
    assert per[TRAIN]["prv"] is None and per[VALIDATION]["prv"] is not None  # the mixed case
    said = site.after_round_summary()
    assert math.isnan(said["epsilon_prv"]), said  # before: the validation patients' PRV ε
    assert said["epsilon_rdp"] == max(per[TRAIN]["rdp"], per[VALIDATION]["rdp"])
    larger = TRAIN if per[TRAIN]["rdp"] >= per[VALIDATION]["rdp"] else VALIDATION
    assert said["epsilon_population"] == larger


def test_prv_over_every_population_when_each_has_one() -> None:
    site = _site()
    site.ledger.record("site0", TRAIN, 1, "alpha_scalars", Gaussian(1.0, 1))
    site.ledger.record("site0", VALIDATION, 1, "alpha_scalars", Gaussian(3.0, 1))
    per = site.epsilon()
    said = site.after_round_summary()
    assert said["epsilon_prv"] == max(per[TRAIN]["prv"], per[VALIDATION]["prv"])
    assert said["epsilon_population"] == TRAIN  # σ 1 costs more than σ 3


def test_a_refusal_says_whose_accountant_its_would_be_epsilon_is() -> None:
    """A site's signed budget refusal carries the accountant of its would-be ε: the guard's (PRV)
    where it priced the refused population, RDP where it had no PRV figure (issue 64 item 4)."""
    cfg = build_config(
        {"fed": {"rounds": 3}, "dp": {"enabled": True, "target_epsilon": 1.0, "accountant": "prv"}}
    )
    site = SitePrivacy.plan(cfg, "site0", n_train=2800, n_val=400, noise_key=bytes(32))
    site.ledger.record("site0", VALIDATION, 1, "alpha_scalars", Gaussian(0.3, 1))  # past the budget
    admission = site.admit_round(2)
    assert not admission.ok and site.refused_population == VALIDATION, admission
    assert site.refused_accountant == "prv"  # a Gaussian has a PRV ε: the guard's own
    assert (
        admission.would_be_epsilon
        == site.ledger.projected_epsilon(
            "site0", VALIDATION, [e for _, e in site.round_events()[VALIDATION]], delta=site.delta[VALIDATION]
        )["prv"]
    )
