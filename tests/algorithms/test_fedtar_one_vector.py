"""FedTAR's one-vector release under distributed DP (`train.fedtar_release = "one-vector"`,
`secure_fed.algorithms.fedtar.release`): what a site releases for a patient, what the round costs,
and how the server reads α's hypergradient from the sketches.

(a) A patient's vector is [Σ_t ω_t g_t ; κ P g_t] of its own per-visit-index gradients (ω the
chain's weights from the round's α at FedAvg's scale), clipped to C as one vector — through the real
site path (`clipped_gradient_sum` on the tiny preset's ReportModel, unpretrained). (b) The round is
priced as FedAvg's: the same Skellam event (bar the vector's length, which pads to the same
rotation size) and the same ε. (c) The sketch's hypergradient is unbiased over sketch seeds, and
with P = I the server's surrogate snapshots give the exact chain's α-hypergradient. About 40 s.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

import numpy as np
import pytest
import torch

from secure_fed.algorithms.fedtar.learner import ReportLearner
from secure_fed.algorithms.fedtar.profile import fit_gmm
from secure_fed.algorithms.fedtar.release import (
    OneVectorRelease,
    check_alpha,
    direction_step_norm,
    release_weights,
    sketch_matrix,
    sketch_scale,
    sketch_seed,
    split_release,
    surrogate_snapshots,
    surrogate_steps,
)
from secure_fed.algorithms.fedtar.temporal import chain_weights, temporal_step
from secure_fed.config import RunConfig
from secure_fed.dp.accountants import epsilon_rdp
from secure_fed.dp.distributed import padded_size
from secure_fed.dp.distributed.run import delta, histogram_sigma, plan_for
from secure_fed.dp.histogram import histogram_event
from secure_fed.dp.keystream import NoiseStream
from secure_fed.model.report_model import ReportModel
from secure_fed.site.distributed import ClippedSum, clipped_gradient_sum
from secure_fed.site.site import SiteData, attach_profiles, load_site, patient_profiles
from tests.conftest import DISTRIBUTED_DP, small_config

ALPHA = np.array([0.5, 0.3, 0.2])  # T = 3 (the small config), inside the floor's [0.1, 0.8]
NO_CLIP = 1e9


@pytest.fixture(scope="module")
def prepared(
    tmp_path_factory: pytest.TempPathFactory, one_torch_thread: None
) -> tuple[RunConfig, SiteData, ReportModel]:
    root = tmp_path_factory.mktemp("one_vector")
    cfg = small_config(
        root / "cache", root / "out", model__pretrain_steps=0, fed__method="fedtar", **DISTRIBUTED_DP
    )
    assert cfg.train.fedtar_release == "one-vector"  # the distributed default
    data = load_site(cfg, "site0")
    gmm, _ = fit_gmm(patient_profiles(data.train), cfg.model.gmm_components, cfg.model.gmm_reg_covar, 0, None)
    from secure_fed.model.setup import build_report_model, visit_slots

    attach_profiles(data, gmm, visit_slots(cfg))

    return cfg, data, build_report_model(cfg)


def _start(model: ReportModel) -> OrderedDict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)  # LoRA's B starts at zero: move off it
    return OrderedDict(
        (n, v + 0.02 * torch.randn(v.shape, generator=gen, dtype=v.dtype))
        for n, v in model.trainable_state().items()
    )


def _stream() -> NoiseStream:
    return NoiseStream(bytes([7]) * 32)


@pytest.mark.slow  # per-patient gradients of a whole site: make test-fast leaves it out
def test_a_patients_vector_is_its_weighted_gradient_and_sketches_clipped_as_one(
    prepared: tuple[RunConfig, SiteData, ReportModel],
) -> None:
    cfg, data, model = prepared
    t_max, k = cfg.data.max_visits, cfg.train.fedtar_sketch_dim
    examples = data.train
    n = 1 + int(examples.patient_slot.max())
    groups = [examples.at_visit(t) for t in range(1, t_max + 1)]
    dim = sum(p.numel() for p in model.parameters() if p.requires_grad)
    start = _start(model)
    release = OneVectorRelease.for_round(cfg, "fedtar", 1, ALPHA, dim)
    c = chain_weights(ALPHA, kind=cfg.train.fedtar_chain)
    np.testing.assert_allclose(release.weights, t_max * c / c.sum(), rtol=1e-15)
    kappa = sketch_scale(cfg.train.fedtar_sketch_share)
    np.testing.assert_allclose(release.scales, kappa * release.weights, rtol=1e-15)
    sketch = sketch_matrix(sketch_seed(cfg, 1), k, dim)
    assert release.dim == dim + t_max * k
    work = ClippedSum(model, NO_CLIP, copies=t_max)
    clipped_work = ClippedSum(model, 0.01, copies=t_max)

    vectors = {}
    for slot in range(n):
        mine = [g.subset(torch.nonzero(g.patient_slot == slot).flatten()) for g in groups]
        if not sum(len(g) for g in mine):
            continue
        # the copies' gradients g_t, each at the start on the patient's visit-t rows (unclipped)
        copies, _ = clipped_gradient_sum(model, start, mine, NO_CLIP, 1.0, n, _stream(), work=work)
        per_t = copies.reshape(t_max, dim)
        v, sampled = clipped_gradient_sum(
            model, start, mine, NO_CLIP, 1.0, n, _stream(), work=work, release=release
        )
        assert sampled == n
        sketches = (kappa * w * (sketch @ g) for w, g in zip(release.weights, per_t, strict=True))
        expected = np.concatenate([release.weights @ per_t, *sketches])
        scale = float(np.abs(expected).max())
        np.testing.assert_allclose(v, expected, rtol=1e-4, atol=1e-5 * scale)
        vectors[slot] = v
        # clipped to C as one vector: a common factor on the model part and the sketches alike
        clip = 0.5 * float(np.linalg.norm(v))
        if clipped_work.clip != clip:
            clipped_work = ClippedSum(model, clip, copies=t_max)
        alone, _ = clipped_gradient_sum(
            model, start, mine, clip, 1.0, n, _stream(), work=clipped_work, release=release
        )
        np.testing.assert_allclose(alone, v * 0.5, rtol=1e-6, atol=1e-9 * scale)
        assert np.linalg.norm(alone) <= clip * (1 + 1e-9)
    assert len(vectors) >= 4
    many = [
        s
        for s in vectors
        if np.count_nonzero(np.linalg.norm(vectors[s][dim:].reshape(t_max, k), axis=1)) >= 2
    ]
    assert many, "no patient with two visits: the weights would not be seen"

    # the whole sample: the sum of every patient's vector, each clipped on its own
    clip = float(np.median([np.linalg.norm(v) for v in vectors.values()]))
    together, _ = clipped_gradient_sum(
        model,
        start,
        groups,
        clip,
        1.0,
        n,
        _stream(),
        work=ClippedSum(model, clip, copies=t_max),
        release=release,
    )
    expected = sum(v * min(1.0, clip / float(np.linalg.norm(v))) for v in vectors.values())
    np.testing.assert_allclose(together, expected, rtol=1e-4, atol=1e-6 * float(np.abs(expected).max()))


@pytest.mark.slow  # two private rounds of a site: make test-fast leaves it out
def test_the_one_vector_round_is_priced_as_fedavgs(prepared: tuple[RunConfig, SiteData, ReportModel]) -> None:
    """Same sensitivity C, same sampling, one event a round: FedAvg's ledger event and ε. The
    vector is T·k longer, which pads to the same rotation size, so even the rounding's share of the
    sensitivity is FedAvg's. The T copies pad to T times the size: another plan."""
    cfg, data, model = prepared
    learner = ReportLearner(cfg, data, model=model)
    fedavg_cfg = cfg.model_copy(update={"fed": cfg.fed.model_copy(update={"method": "fedavg"})})
    copies_cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"fedtar_release": "copies"})})
    dims = {
        "one-vector": learner.distributed_dim("fedtar"),
        "fedavg": learner.distributed_dim("fedavg"),
        "copies": ReportLearner(copies_cfg, data, model=model).distributed_dim("fedtar"),
    }
    assert dims["one-vector"] == dims["fedavg"] + cfg.data.max_visits * cfg.train.fedtar_sketch_dim
    q, rounds = cfg.dp.sample_rate, cfg.fed.rounds
    plans = {
        "one-vector": plan_for(cfg, dims["one-vector"], 3),
        "fedavg": plan_for(fedavg_cfg, dims["fedavg"], 3),
        "copies": plan_for(copies_cfg, dims["copies"], 3),
    }
    events = {name: plan.event(q, rounds) for name, plan in plans.items()}
    ours, theirs = dataclasses.asdict(events["one-vector"]), dataclasses.asdict(events["fedavg"])
    assert ours.pop("dim") == dims["one-vector"] and theirs.pop("dim") == dims["fedavg"]
    assert ours == theirs
    gmm = histogram_event(histogram_sigma(cfg))
    eps = {name: epsilon_rdp([gmm, event], delta(cfg)) for name, event in events.items()}
    assert eps["one-vector"] == eps["fedavg"] and 8.0 * (1 - 1e-3) <= eps["fedavg"] <= 8.0
    assert plans["one-vector"].noise_std == plans["fedavg"].noise_std
    # the test can tell plans apart: the copies' vector pads to another size, ring unit and Δ₁
    assert events["copies"].padded_dim == padded_size(dims["copies"]) > events["fedavg"].padded_dim
    assert events["copies"].gamma != events["fedavg"].gamma
    assert events["copies"].l1_sensitivity != events["fedavg"].l1_sensitivity


def test_the_sketch_inner_product_is_unbiased_over_seeds() -> None:
    """E_P⟨Pa, Pb⟩ = ⟨a, b⟩ (E[PᵀP] = I) with Var = (‖a‖²‖b‖² + ⟨a, b⟩²)/k: over 400 seeds the mean
    is within 4 standard errors of ⟨a, b⟩, and the spread is the JL one within 15 %."""
    rng = np.random.default_rng(0)
    dim, k, seeds = 400, 64, 400
    a, b = rng.normal(size=dim), rng.normal(size=dim)
    b += 0.8 * a  # a clear inner product to estimate
    exact = float(a @ b)
    found = np.array(
        [
            float((p @ a) @ (p @ b))
            for p in (sketch_matrix(bytes([s % 256, s // 256]) * 16, k, dim) for s in range(seeds))
        ]
    )
    spread = np.sqrt((float(a @ a) * float(b @ b) + exact**2) / k)
    assert abs(found.mean() - exact) < 4 * spread / np.sqrt(seeds), (found.mean(), exact)
    assert abs(found.std() / spread - 1) < 0.15


@pytest.mark.parametrize("kind", ["residual", "convex"])
def test_with_the_identity_sketch_the_surrogates_give_the_exact_hypergradient(make_config, kind: str) -> None:
    """k = D, P = I: the server's reading of the release (model part, sketches over κ) and its
    surrogate snapshots w_g − η·ŝ_t give the chain the exact per-visit steps −η·g_t give, and so the
    same α-hypergradient ⟨∇L, ∂w/∂α_t⟩ for any ∇L. With a Gaussian P, the surrogate chain's
    hypergradient averages to the exact one over sketch seeds (at a fixed η: the directions are
    linear in the steps)."""
    cfg = make_config(train__fedtar_chain=kind)
    rng = np.random.default_rng(1)
    t_max, dim = 3, 12
    start, grad_val = rng.normal(size=dim), rng.normal(size=dim)
    per_t = rng.normal(size=(t_max, dim)) * np.array([[1.0], [0.5], [2.0]])
    weights = release_weights(ALPHA, kind)
    scales = sketch_scale(0.3) * weights
    model_part = weights @ per_t
    released = np.concatenate([model_part, (scales[:, None] * per_t).reshape(-1)])  # P = I
    got_model, sketches = split_release(released, dim, t_max, dim, scales)
    np.testing.assert_allclose(got_model, model_part, rtol=1e-15)
    np.testing.assert_allclose(sketches, per_t, rtol=1e-12)
    norm = direction_step_norm(cfg, dim)
    snapshots = surrogate_snapshots(start, surrogate_steps(np.eye(dim), sketches), norm)
    eta = norm / float(np.linalg.norm(per_t, axis=1).max())
    exact = temporal_step(kind, start, start - eta * per_t, ALPHA)
    chain = temporal_step(kind, start, snapshots, ALPHA)
    np.testing.assert_allclose(chain.directions @ grad_val, exact.directions @ grad_val, rtol=1e-10)
    assert np.linalg.norm(chain.directions, axis=1).max() <= cfg.dp.alpha_direction_norm

    # a Gaussian sketch: the same hypergradient on average (fixed η, 300 seeds)
    k, seeds = 8, 300
    found = []
    for s in range(seeds):
        p = sketch_matrix(bytes([s % 256, s // 256, 1]) + bytes(29), k, dim)
        steps = surrogate_steps(p, per_t @ p.T)  # what the server reads from sketches ŝ_t = P g_t
        found.append(temporal_step(kind, start, start - eta * steps, ALPHA).directions @ grad_val)
    found_arr = np.array(found)
    standard_error = found_arr.std(axis=0) / np.sqrt(seeds)
    target = exact.directions @ grad_val
    assert np.all(np.abs(found_arr.mean(axis=0) - target) < 4 * standard_error), (found_arr.mean(0), target)


def test_surrogate_directions_stay_within_what_a_site_accepts(make_config) -> None:
    """However long the sketches, the surrogate steps are scaled to at most half the sites'
    `dp.alpha_direction_norm`, and the chain's directions to at most that norm."""
    cfg = make_config(train__lr=10.0)  # lr·√D far above the limit: the limit binds
    rng = np.random.default_rng(2)
    dim, t_max = 500, 3
    start = rng.normal(size=dim)
    p = sketch_matrix(bytes(32), 16, dim)
    sketches = 1e6 * rng.normal(size=(t_max, 16))
    snapshots = surrogate_snapshots(start, surrogate_steps(p, sketches), direction_step_norm(cfg, dim))
    chain = temporal_step("residual", start, snapshots, ALPHA)
    assert np.linalg.norm(snapshots - start, axis=1).max() == pytest.approx(0.5 * cfg.dp.alpha_direction_norm)
    assert np.linalg.norm(chain.directions, axis=1).max() <= cfg.dp.alpha_direction_norm


@pytest.mark.parametrize(
    ("alpha", "says"),
    [
        ([0.5, 0.5], "must hold 3 weights"),
        ([0.5, 0.3, float("nan")], "finite"),
        ([0.5, 0.3, 0.3], "sum to 1"),
        ([0.95, 0.03, 0.02], "must lie in"),
        ("uniform", "list of numbers"),
    ],
)
def test_a_malformed_alpha_is_named(alpha: object, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        check_alpha(alpha, 3, 0.1)
    np.testing.assert_array_equal(check_alpha(ALPHA.tolist(), 3, 0.1), ALPHA)


@pytest.mark.parametrize("alpha", [ALPHA, np.array([0.1, 0.1, 0.8]), np.full(3, 1 / 3)])
def test_a_one_visit_patients_sketch_takes_the_same_share_whatever_alpha(
    make_config, alpha: np.ndarray
) -> None:
    """Visit t's sketch is weighed by ω_t like its gradient: a patient with one visit gives the
    sketch κ‖Pg‖/√(‖g‖² + κ²‖Pg‖²) of its norm (ρ where ‖Pg‖ = ‖g‖) at every α; with one κ for
    every t, a visit of small weight was mostly sketch."""
    cfg = make_config(**DISTRIBUTED_DP, fed__method="fedtar")
    dim, t_max = 300, 3
    grad = torch.tensor(np.random.default_rng(3).normal(size=(1, dim)))
    release = OneVectorRelease.for_round(cfg, "fedtar", 1, alpha, dim)
    assert release.sketch is not None
    kappa = sketch_scale(cfg.train.fedtar_sketch_share)
    jl = float(np.linalg.norm(release.sketch @ grad.numpy()[0]) / np.linalg.norm(grad.numpy()[0]))
    expected = kappa * jl / np.sqrt(1 + (kappa * jl) ** 2)
    for t in range(t_max):
        per_copy = [grad if s == t else None for s in range(t_max)]
        row = release(per_copy)[0].numpy()
        share = np.linalg.norm(row[dim:]) / np.linalg.norm(row)
        assert share == pytest.approx(expected, rel=1e-9), (t, alpha)
