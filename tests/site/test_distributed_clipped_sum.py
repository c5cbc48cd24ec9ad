"""A distributed-DP site builds its work copy of the model and the clipping engine once and reuses
them every round (`secure_fed.site.distributed.ClippedSum`). Reuse must not carry anything from
one round into the next: the clipped sum of a reused copy, and what it takes from the round's
keystream (which then seeds the share's rounding and noise), must be bit for bit those of a fresh
copy given the same start state, rows and stream — also after a round that failed half way — and the
caller's model is never touched. About 2 s (the tiny preset, unpretrained, 16 patients)."""

from __future__ import annotations

import copy
from collections import OrderedDict
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from secure_fed.algorithms.fedtar.learner import ReportLearner
from secure_fed.algorithms.fedtar.profile import fit_gmm
from secure_fed.config import RunConfig
from secure_fed.data.batching import Examples
from secure_fed.dp.distributed import DistributedPlan, padded_size
from secure_fed.dp.events import rounded_sensitivities
from secure_fed.dp.keystream import NoiseStream
from secure_fed.model.report_model import ReportModel
from secure_fed.model.setup import build_report_model, visit_slots
from secure_fed.model.vectors import flatten
from secure_fed.site.distributed import ClippedSum, clipped_gradient_sum
from secure_fed.site.private import TRAIN
from secure_fed.site.site import SiteData, attach_profiles, load_site, patient_profiles
from tests.conftest import small_config

CLIP = 0.05  # below the typical per-patient norm, so the clipping factors matter


@pytest.fixture(scope="module")
def prepared(
    tmp_path_factory: pytest.TempPathFactory, one_torch_thread: None
) -> tuple[RunConfig, SiteData, ReportModel]:
    root = tmp_path_factory.mktemp("clipped_sum")
    cfg = small_config(
        root / "cache",
        root / "out",
        model__pretrain_steps=0,
        fed__method="fedavg",
        train__local_epochs=1,
        dp__enabled=True,
        dp__target_epsilon=8.0,
        dp__sample_rate=0.5,
        dp__noise="distributed",
        dp__honest_min=3,
    )
    data = load_site(cfg, "site0")
    gmm, _ = fit_gmm(patient_profiles(data.train), cfg.model.gmm_components, cfg.model.gmm_reg_covar, 0, None)
    attach_profiles(data, gmm, visit_slots(cfg))
    return cfg, data, build_report_model(cfg)


@pytest.fixture(scope="module")
def site(prepared: tuple[RunConfig, SiteData, ReportModel]) -> tuple[ReportModel, Examples, int]:
    _, data, model = prepared
    return model, data.train, 1 + int(data.train.patient_slot.max())


def _start(model: ReportModel, seed: int) -> OrderedDict[str, torch.Tensor]:
    """A round's global adapters: the model's, moved by a seeded step (LoRA's B starts at zero)."""
    gen = torch.Generator().manual_seed(seed)
    return OrderedDict(
        (n, v + 0.02 * torch.randn(v.shape, generator=gen, dtype=v.dtype))
        for n, v in model.trainable_state().items()
    )


def _stream(round_id: int) -> NoiseStream:
    return NoiseStream(bytes([round_id]) * 32)


def _run(
    model: ReportModel,
    examples: Examples,
    n: int,
    start: OrderedDict[str, torch.Tensor],
    stream: NoiseStream,
    work: ClippedSum | None,
) -> tuple[bytes, int, int, bytes]:
    """(the sum's bytes, patients sampled, keystream bytes drawn, the keystream's next bytes)."""
    torch.manual_seed(0)  # any dropout draws from torch's generator: the same in both runs
    total, sampled = clipped_gradient_sum(model, start, examples, CLIP, 0.5, n, stream, work=work)
    drawn = stream.bytes_drawn
    after = np.empty(4, dtype=np.uint64)
    stream.fill(after)  # what seeds the share's rounding and noise next
    return total.tobytes(), sampled, drawn, after.tobytes()


def _snapshot(model: ReportModel) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_a_reused_copy_gives_a_fresh_copys_sum_and_draws(site: tuple[ReportModel, Examples, int]) -> None:
    model, examples, n = site
    before = _snapshot(model)
    work = ClippedSum(model, CLIP)
    for round_id in (1, 2, 3):
        start = _start(model, round_id)
        reused = _run(model, examples, n, start, _stream(round_id), work)
        fresh = _run(model, examples, n, start, _stream(round_id), None)
        assert reused[1] > 0, "no patient sampled: the round compares two zero vectors"
        assert np.frombuffer(reused[0]).any()
        assert reused == fresh, f"round {round_id}: the reused copy's sum or keystream use differs"
    # the sums really depend on the round's start: otherwise a stale state would pass unseen
    assert _run(model, examples, n, _start(model, 1), _stream(3), None)[0] != fresh[0]
    after = _snapshot(model)
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before), "the caller's model changed"
    assert all(p.grad is None and getattr(p, "grad_sample", None) is None for p in model.parameters())


def test_a_round_that_failed_half_way_leaves_nothing_behind(
    site: tuple[ReportModel, Examples, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round that raises after its backward (per-row gradients stored) must not leak them, nor
    its stream, into the next round."""
    model, examples, n = site
    work = ClippedSum(model, CLIP)
    _run(model, examples, n, _start(model, 1), _stream(1), work)
    assert work.engine is not None

    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the site stopped mid-round")

    with monkeypatch.context() as patch:
        patch.setattr(work.engine, "privatize", fail)
        with pytest.raises(RuntimeError, match="mid-round"):
            _run(model, examples, n, _start(model, 2), _stream(2), work)
    start = _start(model, 3)
    after_failure = _run(model, examples, n, start, _stream(3), work)
    assert after_failure == _run(model, examples, n, start, _stream(3), None)


def test_a_round_restores_the_modes_train_sets(site: tuple[ReportModel, Examples, int]) -> None:
    """The modes are set once and checked each round (ReportModel.train() costs most of a round's
    setup); a copy switched to eval in between is back in training mode for the step."""
    model, _, _ = site
    work = ClippedSum(model, CLIP)
    expected = [m.training for m in copy.deepcopy(model).train().modules()]
    work.works[0].eval()
    work.prepare(_start(model, 1), _stream(1))
    assert [m.training for m in work.works[0].modules()] == expected and any(expected)


def test_a_copy_serves_only_the_model_and_clip_it_was_made_for(
    site: tuple[ReportModel, Examples, int],
) -> None:
    model, examples, n = site
    work = ClippedSum(model, CLIP)
    stranger = copy.deepcopy(model)
    assert work.serves(model, CLIP)
    assert not work.serves(stranger, CLIP) and not work.serves(model, 2 * CLIP)
    for other, clip in ((stranger, CLIP), (model, 2 * CLIP)):
        with pytest.raises(ValueError, match="built for another model or clip"):
            clipped_gradient_sum(other, _start(model, 1), examples, clip, 0.5, n, _stream(1), work=work)


@pytest.mark.parametrize(
    ("method", "release"), [("fedavg", "copies"), ("fedtar", "copies"), ("fedtar", "one-vector")]
)
def test_the_learner_keeps_one_copy_and_shares_as_a_fresh_one_would(
    prepared: tuple[RunConfig, SiteData, ReportModel], method: str, release: str
) -> None:
    """The caller: `ReportLearner.distributed_update` builds its ClippedSum in its first round and
    reuses it; its round-2 share (the clipped sum encoded with the keystream's rounding and noise)
    is the one a learner without a kept copy sends from the same start and stream."""
    cfg, data, model = prepared
    cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"fedtar_release": release})})
    n = 1 + int(data.train.patient_slot.max())
    dim = ReportLearner(cfg, data, model=model).distributed_dim(method)
    adapters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    t_max = cfg.data.max_visits
    if release == "one-vector":  # the model part and T sketches of k rows
        assert dim == adapters + t_max * cfg.train.fedtar_sketch_dim
    else:
        assert dim == adapters * (t_max if method == "fedtar" else 1)
    options = {"alpha": np.full(t_max, 1.0 / t_max)} if release == "one-vector" else {}
    # a plan made by hand: the encoding is under test, not the calibration (plan_for: 5 s CPU)
    padded, gamma = padded_size(dim), 1e-5
    l2, l1 = rounded_sensitivities(CLIP, gamma, padded)
    plan = DistributedPlan(
        clip=CLIP, dim=dim, padded_dim=padded, gamma=gamma, bits=32, honest_min=3, colluders=1,
        site_bound=n * CLIP, mu_total=400.0, share_mu=200.0, l2_sensitivity=l2, l1_sensitivity=l1,
        max_sites=3, wrap_bound_sites=3, wrap_tail=1e-9,
    )  # fmt: skip
    privacy = SimpleNamespace(
        distributed=plan,
        clip=CLIP,
        sampling_rate=0.5,
        n_patients={TRAIN: n},
        noise_stream=lambda purpose, round_id: _stream(round_id),
        max_patients_per_pass=cfg.dp.max_patients_per_pass,
        keep_layers=lambda round_id, seeds: None,  # the layers' seeds, for the runtime (not compared here)
    )
    kept = ReportLearner(cfg, data, model=model)
    kept.distributed_update(1, method, flatten(_start(model, 1)).numpy(), privacy, options)  # type: ignore[arg-type]
    work = kept._clipped_sum
    assert work is not None and work.serves(model, CLIP, cfg.data.max_visits if method == "fedtar" else 1)
    global_vec = flatten(_start(model, 2)).numpy()
    torch.manual_seed(0)
    share, steps, _ = kept.distributed_update(2, method, global_vec, privacy, options)  # type: ignore[arg-type]
    assert kept._clipped_sum is work and steps == 1
    torch.manual_seed(0)
    fresh, _, _ = ReportLearner(cfg, data, model=model).distributed_update(  # type: ignore[arg-type]
        2, method, global_vec, privacy, options
    )
    assert share.size == padded and share.tobytes() == fresh.tobytes()


def test_fedtars_step_clips_a_patients_visits_together(site: tuple[ReportModel, Examples, int]) -> None:
    """FedTAR's distributed step trains one copy per visit index. Clipped copy by copy, a patient
    with T visits would add up to C·√T to the sum, above the sensitivity C the plan's noise is
    calibrated to. Each patient's contribution over all copies has norm ≤ C, several copies carry
    it, and the step's sum is the sum of the patients' contributions."""
    model, examples, n = site
    visits = sorted({int(v) for v in examples.visit_index})
    groups = [examples.at_visit(t) for t in visits]
    assert len(groups) >= 2
    start = _start(model, 1)
    dim = sum(p.numel() for p in model.parameters() if p.requires_grad)
    work = ClippedSum(model, CLIP, copies=len(groups))

    def alone(slot: int) -> np.ndarray:
        mine = [g.subset(torch.nonzero(g.patient_slot == slot).flatten()) for g in groups]
        total, sampled = clipped_gradient_sum(model, start, mine, CLIP, 1.0, n, _stream(1), work=work)
        assert sampled == n  # q = 1: everyone is sampled; only `slot` has rows
        return total

    many = [s for s in range(n) if sum(int((g.patient_slot == s).sum()) > 0 for g in groups) >= 2]
    assert many, "no patient with two visits: the test would not see joint clipping"
    contributions = {s: alone(s) for s in range(n)}
    for s in many:
        blocks = contributions[s].reshape(len(groups), dim)
        assert (np.linalg.norm(blocks, axis=1) > 0).sum() >= 2
        assert np.linalg.norm(contributions[s]) <= CLIP * (1 + 1e-5)
    together, _ = clipped_gradient_sum(model, start, groups, CLIP, 1.0, n, _stream(1), work=work)
    np.testing.assert_allclose(together, np.sum(list(contributions.values()), axis=0), atol=1e-6 * CLIP)
