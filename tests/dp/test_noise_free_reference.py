"""dp.noise_free_reference: the private recipe (Poisson sampling, steps, per-patient clipping) with no
noise, a reference that is never presented as private: no σ, no ledger entry, no privacy record, no
ε in any reply or metrics (a number there would read as a guarantee), ε = ∞ wherever one is shown."""

from __future__ import annotations

import numpy as np
import pytest

from secure_fed.config import ConfigError, build_config
from secure_fed.dp.histogram import histogram_event
from secure_fed.lab.cells import NOISE_FREE_METHODS, seed_config, spent_per_site
from secure_fed.server.orchestrator import NOISE_FREE_PRIVACY
from secure_fed.site.private import TRAIN, VALIDATION, SitePrivacy

REFERENCE = {
    "fed": {"rounds": 3, "method": "fedtar"},
    "train": {"local_epochs": 1},
    "dp": {"enabled": True, "noise_free_reference": True, "sample_rate": 0.1, "max_grad_norm": 9.0},
}


@pytest.mark.parametrize(
    ("dp", "message"),
    [
        ({"enabled": False}, "needs dp.enabled = true"),
        ({"target_epsilon": 8.0}, r"adds no noise \(ε = ∞\): unset dp.target_epsilon"),
        ({"noise_multiplier": 0.0, "budget_epsilon": 8.0}, "unset dp.noise_multiplier, dp.budget_epsilon"),
        ({"noise": "distributed"}, "site mode only"),
        ({"ledger_dir": "/tmp/ledgers"}, "unset dp.ledger_dir"),
    ],
)
def test_the_switch_is_refused_where_it_could_read_as_private(dp: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        build_config({**REFERENCE, "dp": {**REFERENCE["dp"], **dp}})
    assert "\n" not in str(err.value)
    assert build_config(REFERENCE).dp.noise_free_reference
    assert not build_config({}).dp.noise_free_reference  # off by default


class _Trail:
    def __init__(self) -> None:
        self.records: list[tuple] = []

    def privacy(self, *args: object) -> None:
        self.records.append(args)


def test_a_site_trains_the_recipe_unnoised_and_logs_no_epsilon() -> None:
    cfg = build_config(REFERENCE)
    site = SitePrivacy.plan(cfg, "site0", n_train=2800, n_val=400, noise_key=bytes(32))
    assert site.noise_free and site.sigma == site.histogram_sigma == site.alpha_sigma == 0.0
    assert (site.sampling_rate, site.clip, site.steps) == (0.1, 9.0, 10)  # the private recipe's
    site.trail = trail = _Trail()
    site.record_gmm(histogram_event(0.0))
    for round_id in (1, 2, 3):
        admission = site.admit_round(round_id)
        assert admission.ok and admission.would_be_epsilon == np.inf
    assert trail.records == []  # no privacy record: nothing that could read as a finite ε
    populations = site.ledger.populations("site0")
    assert TRAIN not in populations and VALIDATION not in populations
    summary = site.after_round_summary()
    assert summary["noise_free_reference"] is True and not any(k.startswith("epsilon") for k in summary)
    gradients = site.gradients(1)
    assert (gradients.sigma, gradients.clip, gradients.q) == (0.0, 9.0, 0.1)


def test_the_run_and_the_sweep_name_no_epsilon_for_the_reference() -> None:
    assert NOISE_FREE_PRIVACY["epsilon"] is None and spent_per_site(NOISE_FREE_PRIVACY) == []
    base = build_config({"fed": {"rounds": 5}, "dp": {"sample_rate": 0.1, "max_grad_norm": 9.0}})
    assert set(NOISE_FREE_METHODS) == {"central-clip", "fedavg-clip", "fedtar-clip"}
    cfg = seed_config(base, "fedavg-clip", None, 2)
    assert cfg.fed.method == "fedavg" and cfg.seed == 2
    assert cfg.dp.enabled and cfg.dp.noise_free_reference and cfg.dp.target_epsilon is None
    assert (cfg.dp.sample_rate, cfg.dp.max_grad_norm, cfg.fed.rounds) == (0.1, 9.0, 5)
    with pytest.raises(ValueError, match="ε = ∞ only"):
        seed_config(base, "fedavg-clip", 8.0, 0)
    # the plain method's cells are untouched by the reference
    assert not seed_config(base, "fedavg", 8.0, 0).dp.noise_free_reference


def test_the_pooled_central_reference_runs_the_recipe_and_reports_no_epsilon(make_config) -> None:
    from secure_fed.lab.centralised import train_private_central
    from secure_fed.model.setup import build_report_model

    cfg = make_config(
        model__pretrain_steps=0, dp__enabled=True, dp__noise_free_reference=True, dp__sample_rate=0.5,
        fed__rounds=1, train__local_epochs=1,
    )  # fmt: skip
    privacy = train_private_central(cfg, build_report_model(cfg)).privacy
    assert privacy["noise_free_reference"] is True and privacy["epsilon"] is None
    assert privacy["noise_multiplier"] == privacy["histogram_noise_multiplier"] == 0.0
    assert privacy["steps"] == 2 and privacy["clip"] == cfg.dp.max_grad_norm  # 1 epoch at q = 0.5
    assert spent_per_site(privacy) == []


@pytest.mark.slow  # a whole run in process: make test-fast leaves it out
def test_a_federated_reference_run_logs_no_privacy_record_and_its_report_reads_infinity(make_config) -> None:
    import json

    from secure_fed.audits.keys import load_public_keys
    from secure_fed.launch.runner import run_inprocess
    from secure_fed.verifier.report import write_report
    from secure_fed.verifier.verify import verify_logs

    cfg = make_config(
        model__pretrain_steps=0, dp__enabled=True, dp__noise_free_reference=True, dp__sample_rate=0.5,
        fed__rounds=1, train__local_epochs=1, fed__method="fedavg",
    )  # fmt: skip
    metrics = run_inprocess(cfg, cfg.out).metrics
    assert metrics["privacy"] == NOISE_FREE_PRIVACY
    assert all(not r["epsilon"] for r in metrics["per_round"])
    logs = sorted((cfg.out / "audit").glob("*.jsonl"))
    events = [json.loads(line)["event"] for log in logs for line in log.read_text().splitlines()]
    assert "privacy" not in events and "secagg_round" in events  # SecAgg+ as in the private recipe
    assert verify_logs(logs, load_public_keys(cfg.out / "keys")).ok
    write_report(logs, cfg.out / "report.html")
    assert "released without differential privacy (ε = ∞)" in (cfg.out / "report.html").read_text()


def test_the_audit_reads_a_reference_run_config_as_no_dp_with_its_secure_sum() -> None:
    from secure_fed.audits.payloads import run_settings

    snapshot = build_config(REFERENCE).model_dump(mode="json")
    settings = run_settings(snapshot)
    assert settings.dp is False and settings.secagg is True  # SecAgg+ follows dp.enabled, as the run's
    private = {**snapshot, "dp": {**snapshot["dp"], "noise_free_reference": False, "target_epsilon": 8.0}}
    assert run_settings(private).dp is True
