"""A site's DP randomness: one keystream per release, pinned only through injected entropy, and a
restart that reuses its kept GMM histogram rather than releasing a second one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from secure_fed.algorithms.fedtar.profile import fit_gmm
from secure_fed.data.profile import profile_vector
from secure_fed.dp.keystream import NoiseStream, release_key
from secure_fed.site.private import SitePrivacy

KEY = bytes(range(32))
FRESH = bytes(range(64, 96))


def site(entropy: object = None, ledger: Path | None = None) -> SitePrivacy:
    privacy = SitePrivacy(
        site="site0",
        sampling_rate=0.5,
        clip=1.0,
        sigma=1.0,
        steps=2,
        histogram_sigma=2.0,
        alpha_clip=0.5,
        alpha_sigma=2.0,
        delta={"train": 1e-5, "validation": 1e-5},
        budget=float("inf"),
        n_patients={"train": 60, "validation": 10},
        noise_key=KEY,
    )
    if entropy is not None:
        privacy.entropy = entropy  # type: ignore[assignment]
    if ledger is not None:
        privacy.load_ledger(ledger)
    return privacy


def profiles() -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.stack(
        [profile_vector(f"P{i}", float(rng.uniform(20, 90)), "FM"[i % 2], KEY) for i in range(60)]
    )


def test_each_release_draws_from_its_own_stream_pinned_only_by_the_entropy() -> None:
    pinned = site(entropy=lambda n: FRESH[:n])
    per_patient = np.zeros((3, 4))
    alpha = pinned.release_alpha_scalars(per_patient, 2)
    expected = NoiseStream(release_key(KEY, "alpha", 2, FRESH)).normal(0.0, 2.0 * 0.5, size=4)
    assert np.array_equal(alpha, expected)
    # same entropy, another round or purpose: another key
    assert not np.array_equal(pinned.release_alpha_scalars(per_patient, 3), alpha)
    gradients = pinned.gradients(2)
    assert np.array_equal(
        gradients.sample(100).numpy(),
        np.flatnonzero(NoiseStream(release_key(KEY, "dpsgd", 2, FRESH)).random(100) < 0.5),
    )
    # real OS entropy: the same site, round and purpose never give the same noise twice
    real = site()
    assert not np.array_equal(
        real.release_alpha_scalars(per_patient, 2), real.release_alpha_scalars(per_patient, 2)
    )


def test_dp_sgd_noise_of_a_step_comes_from_the_rounds_stream() -> None:
    gradients = site(entropy=lambda n: FRESH[:n]).gradients(1)
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    gradients.wrap([model])
    assert gradients.engine is not None
    gradients.engine.privatize([None], num_patients=0)
    z = NoiseStream(release_key(KEY, "dpsgd", 1, FRESH)).torch_standard_normal(8, torch.float32)
    expected = z * 1.0 / (0.5 * 60)  # σC / (q n)
    assert torch.equal(torch.cat([model.weight.grad.flatten(), model.bias.grad]), expected)


def test_a_restarted_site_refits_the_same_gmm_from_its_kept_histogram(tmp_path: Path) -> None:
    kept = tmp_path / "gmm-histogram.json"
    first = site(ledger=tmp_path / "ledger.json")
    gmm, event = fit_gmm(profiles(), 4, 1e-6, 0, 2.0, first.noise_stream("gmm_histogram", 0), kept)
    assert event is not None
    first.record_gmm(event)
    assert kept.exists()
    ledger = (tmp_path / "ledger.json").read_text()

    restarted = site(ledger=tmp_path / "ledger.json")  # new process: new entropy, same folder
    stream = restarted.noise_stream("gmm_histogram", 0)
    again, event = fit_gmm(profiles(), 4, 1e-6, 0, 2.0, stream, kept)
    assert event is not None
    restarted.record_gmm(event)
    assert stream.bytes_drawn == 0  # no new noise
    np.testing.assert_array_equal(again._gmm.means_, gmm._gmm.means_)  # the same GMM, so same uploads
    assert (tmp_path / "ledger.json").read_text() == ledger  # charged once
    assert len(restarted.ledger) == 1


def test_a_restart_that_lost_its_histogram_refuses_to_release_a_second_one(tmp_path: Path) -> None:
    first = site(ledger=tmp_path / "ledger.json")
    _, event = fit_gmm(profiles(), 4, 1e-6, 0, 2.0, first.noise_stream("gmm_histogram", 0))
    assert event is not None
    first.record_gmm(event)
    restarted = site(ledger=tmp_path / "ledger.json")
    _, event = fit_gmm(profiles(), 4, 1e-6, 0, 2.0, restarted.noise_stream("gmm_histogram", 0))
    assert event is not None
    with pytest.raises(RuntimeError, match="second release"):
        restarted.record_gmm(event)


def test_plan_refuses_a_noise_key_of_the_wrong_size(make_config) -> None:
    cfg = make_config(dp__enabled=True, dp__target_epsilon=8.0)
    with pytest.raises(ValueError, match="32 bytes"):
        SitePrivacy.plan(cfg, "site0", 40, 10, noise_key=b"short")
    assert SitePrivacy.plan(cfg, "site0", 40, 10, noise_key=KEY).noise_key == KEY
