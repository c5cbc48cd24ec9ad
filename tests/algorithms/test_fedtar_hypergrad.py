"""Validation hypergradient scalars s_{p,t} = ∂L_p/∂α_t (reverse-mode Jacobian-vector products,
float32) against float64 finite differences of the residual chain re-run with α_t ± h, on the real
tiny model and a real site's validation patients (profiles from the site GMM)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.func import functional_call

from secure_fed.algorithms.fedtar.hypergrad import per_patient_hypergradients
from secure_fed.algorithms.fedtar.temporal import ResidualChain, residual_chain
from secure_fed.data.batching import Examples
from secure_fed.model.report_model import ReportModel
from secure_fed.model.vectors import flatten, unflatten
from secure_fed.site.runtime import SiteRuntime
from tests.conftest import small_config

ALPHA = np.array([0.5, 0.3, 0.2])
H = 1e-3


@pytest.fixture(autouse=True, scope="module")
def _threads(one_torch_thread: None) -> None:
    """Model-heavy module: run it on one torch thread (see conftest.one_torch_thread)."""


@pytest.fixture(scope="module")
def site(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> SiteRuntime:
    # No base pretraining: derivatives are checked, not report quality, and this keeps the file fast.
    cfg = small_config(cache_dir, tmp_path_factory.mktemp("hypergrad"), model__pretrain_steps=0)
    return SiteRuntime.create(cfg, "site0")


@pytest.fixture(scope="module")
def chain_setup(site: SiteRuntime) -> tuple[np.ndarray, np.ndarray]:
    """w_0 and three snapshots scattered around the adapters (B = 0 at init, so everything is
    perturbed: every adapter factor is non-zero, as after training)."""
    centre = flatten(site.learner.model.trainable_state()).numpy()
    rng = np.random.default_rng(0)
    start = centre + rng.normal(scale=0.02, size=centre.size)
    snapshots = centre + rng.normal(scale=0.02, size=(3, centre.size))
    return start, snapshots


def patient_losses64(model64: ReportModel, state: np.ndarray, examples: Examples) -> torch.Tensor:
    """L_p = mean over the patient's validation rows of the row loss, in float64."""
    params = unflatten(torch.as_tensor(state, dtype=torch.float64), model64.trainable_state())
    with torch.no_grad():
        rows = functional_call(
            model64,
            params,
            (examples.images.double(), examples.input_ids, examples.profiles.double()),
            strict=False,
        )
    n = int(examples.patient_slot.max()) + 1
    sums = torch.zeros(n, dtype=torch.float64).index_add_(0, examples.patient_slot, rows)
    return sums / torch.bincount(examples.patient_slot, minlength=n).double()


@pytest.fixture(scope="module")
def model64(site: SiteRuntime) -> ReportModel:
    m = copy.deepcopy(site.learner.model).double()
    m.eval()
    return m


@pytest.fixture(scope="module")
def computed(
    site: SiteRuntime, chain_setup: tuple[np.ndarray, np.ndarray]
) -> tuple[ResidualChain, torch.Tensor, torch.Tensor]:
    """One hypergradient run shared by the tests (they are the slow part); batch_size 4 splits patients across
    batches, so the per-patient sums must add up across them."""
    start, snapshots = chain_setup
    chain = residual_chain(start, snapshots, ALPHA)
    before = site.learner.model.trainable_state()
    scalars, losses = per_patient_hypergradients(
        site.learner.model,
        torch.as_tensor(chain.final),
        torch.as_tensor(chain.directions),
        site.learner.data.val,
        batch_size=4,
    )
    # Functional: the model's own adapters are untouched (the very same parameters, no gradient or
    # per-row gradient left on them), and it is left in train mode.
    for name, value in site.learner.model.trainable_state().items():
        assert torch.equal(value, before[name]), name
    for name, param in site.learner.model.named_parameters():
        assert type(param) is torch.nn.Parameter, name
        assert param.grad is None and getattr(param, "grad_sample", None) is None, name
    assert site.learner.model.training
    return chain, scalars, losses


def test_per_patient_hypergradients_match_finite_differences(
    site: SiteRuntime,
    chain_setup: tuple[np.ndarray, np.ndarray],
    model64: ReportModel,
    computed: tuple[ResidualChain, torch.Tensor, torch.Tensor],
) -> None:
    start, snapshots = chain_setup
    chain, scalars, losses = computed
    val = site.learner.data.val
    n_patients = len(set(val.patient_ids))
    assert n_patients >= 2 and len(val) > n_patients  # several patients, some with several visits
    assert scalars.shape == (n_patients, 3) and scalars.dtype == torch.float64
    assert losses.shape == (n_patients,)

    # The per-patient losses are the float64 ones up to float32 rounding.
    torch.testing.assert_close(losses, patient_losses64(model64, chain.final, val), rtol=1e-5, atol=1e-6)

    fd = torch.zeros(n_patients, 3, dtype=torch.float64)
    for t in range(3):
        up, down = ALPHA.copy(), ALPHA.copy()
        up[t] += H
        down[t] -= H
        plus = patient_losses64(model64, residual_chain(start, snapshots, up).final, val)
        minus = patient_losses64(model64, residual_chain(start, snapshots, down).final, val)
        fd[:, t] = (plus - minus) / (2 * H)
    # ψ's objective weighs every report the same: a patient's scalars are the derivative of the sum
    # of its reports' losses, i.e. its reports × the derivative of its mean loss L_p
    reports = torch.bincount(val.patient_slot, minlength=n_patients).double()
    assert reports.max() > reports.min()  # patients with different visit counts: the weighting shows
    fd *= reports[:, None]
    # Error budget, measured on this setup (largest |s| ≈ 0.16): the float64 central difference has
    # truncation error O(h²) — 1.6e-4 at h = 1e-2, 1.6e-6 at h = 1e-3, 4e-8 at h = 1e-4, where the
    # float32 JVP rounding floor shows. At h = 1e-3 a tolerance of 1e-4 × max|s| leaves a 10× margin
    # while still catching a wrong direction, a missing (1 − α) factor or a wrong per-patient mean.
    scale = float(fd.abs().max())
    assert scale > 1e-3  # a non-trivial derivative, so the comparison means something
    torch.testing.assert_close(scalars, fd, rtol=1e-4, atol=1e-4 * scale)
    # Total validation loss Σ_reports ℓ: the per-patient split sums to its derivative.
    torch.testing.assert_close(scalars.sum(0), fd.sum(0), rtol=1e-4, atol=1e-4 * scale)


def test_split_sums_to_reverse_mode_total(
    site: SiteRuntime, model64: ReportModel, computed: tuple[ResidualChain, torch.Tensor, torch.Tensor]
) -> None:
    """Σ_p s_{p,t} = ⟨∇_w Σ_reports ℓ(w^(T)), ∂w^(T)/∂α_t⟩ (every report weighs the same, as the
    test split is scored) with the gradient by reverse mode in float64, and the result does not
    depend on the batch size."""
    chain, small, _ = computed
    val = site.learner.data.val
    final = torch.as_tensor(chain.final)
    directions = torch.as_tensor(chain.directions)
    whole, _ = per_patient_hypergradients(site.learner.model, final, directions, val, batch_size=64)
    torch.testing.assert_close(small, whole, rtol=1e-5, atol=1e-7)

    template = model64.trainable_state()
    params = OrderedDict((k, v.requires_grad_(True)) for k, v in unflatten(final.clone(), template).items())
    rows = functional_call(
        model64, params, (val.images.double(), val.input_ids, val.profiles.double()), strict=False
    )
    total = rows.sum()  # Σ over the reports, each weighing 1 (not Σ_p of p's mean)
    grads = torch.autograd.grad(total, list(params.values()))
    gradient = torch.cat([g.reshape(-1) for g in grads])
    expected = directions @ gradient
    torch.testing.assert_close(whole.sum(0), expected, rtol=1e-4, atol=1e-5 * float(expected.abs().max()))


def test_absent_visit_index_gives_zero_scalar(
    site: SiteRuntime, chain_setup: tuple[np.ndarray, np.ndarray]
) -> None:
    start, snapshots = chain_setup
    chain = residual_chain(start, snapshots, ALPHA, present=np.array([True, True, False]))
    scalars, _ = per_patient_hypergradients(
        site.learner.model,
        torch.as_tensor(chain.final),
        torch.as_tensor(chain.directions),
        site.learner.data.val,
    )
    assert torch.equal(scalars[:, 2], torch.zeros_like(scalars[:, 2]))
    assert scalars[:, :2].abs().max() > 0


def test_unflatten_roundtrip_and_length_check(site: SiteRuntime) -> None:
    state = site.learner.model.trainable_state()
    vec = flatten(state)
    back = unflatten(vec, state)
    assert list(back) == list(state)
    for name in state:
        torch.testing.assert_close(back[name], state[name], rtol=0, atol=0)
    with pytest.raises(ValueError, match="adapters"):
        unflatten(torch.zeros(vec.numel() + 1, dtype=torch.float64), state)


@pytest.mark.slow
def test_the_hypergradient_raises_no_warning_of_its_own(site: SiteRuntime) -> None:
    """A default FedTAR run must print no deprecation warning without a console filter hiding one.
    torch warns once per process, when something first loads its forward-mode decompositions
    (`torch.func.jvp` does, through the deprecated `torch.jit.script`), so the check runs in a fresh
    interpreter where nothing has loaded them yet, every warning an error around the call."""
    script = (
        "import sys, warnings, torch\n"
        "from secure_fed.config import RunConfig\n"
        "from secure_fed.site.runtime import SiteRuntime\n"
        "from secure_fed.algorithms.fedtar.hypergrad import per_patient_hypergradients\n"
        "from secure_fed.model.vectors import flatten\n"
        "cfg = RunConfig.model_validate_json(sys.stdin.read())\n"
        "site = SiteRuntime.create(cfg, 'site0')\n"
        "final = flatten(site.learner.model.trainable_state())\n"
        "directions = torch.randn(2, final.numel(), dtype=torch.float64) * 0.01\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('error')\n"
        "    scalars, _ = per_patient_hypergradients(\n"
        "        site.learner.model, final, directions, site.learner.data.val)\n"
        "assert bool(torch.isfinite(scalars).all()) and scalars.abs().max() > 0\n"
        "loaded = 'torch._decomp.decompositions_for_jvp' in sys.modules\n"
        "print('loaded forward-mode decompositions:', loaded)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=site.cfg.model_dump_json(),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "FLWR_TELEMETRY_ENABLED": "0"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "loaded forward-mode decompositions: False" in done.stdout, done.stdout
