import copy
import hashlib
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel

from secure_fed.dp.dpsgd import PatientDPSGD, poisson_sample
from secure_fed.dp.events import PoissonSampledGaussian
from secure_fed.dp.keystream import NoiseStream

T = 3  # per-visit-index copies
PATIENTS = 4
# Rows of each copy's batch -> patient slot: patient 2 has no visit 3, patient 0 has two rows in
# copy 0 (e.g. two images of one visit).
INDEX = [torch.tensor([0, 1, 2, 3, 0]), torch.tensor([1, 0, 3, 2]), torch.tensor([3, 0, 1])]
RowLosses = Callable[[list[nn.Module]], list[torch.Tensor]]


def noise(seed: int) -> NoiseStream:
    """A keystream under a fixed test key, so a step's noise can be recomputed by hand."""
    return NoiseStream(hashlib.sha256(f"test noise {seed}".encode()).digest())


def module_noise(models: list[nn.Module], stream: NoiseStream) -> list[torch.Tensor]:
    """The documented draw order: one float64 draw per module over its trainable parameters in
    named_parameters() order, rounded to the parameter dtype."""
    out = []
    for m in models:
        params = [p for p in m.parameters() if p.requires_grad]
        z = stream.torch_standard_normal(sum(p.numel() for p in params), params[0].dtype)
        out.extend(
            piece.view(p.shape) for p, piece in zip(params, z.split([p.numel() for p in params]), strict=True)
        )
    return out


def _perturbed_copies(base: nn.Module, config: LoraConfig) -> list[nn.Module]:
    copies = []
    for t in range(T):
        model = get_peft_model(copy.deepcopy(base), config)
        with torch.no_grad():  # distinct adapters per visit index, as after a few rounds
            for name, p in model.named_parameters():
                if "lora_" in name:
                    p.add_(0.1 * (t + 1) * torch.randn_like(p))
        copies.append(model)
    return copies


def _mlp_case() -> tuple[Callable[[], list[nn.Module]], RowLosses]:
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(len(i), 6, generator=g) * 3 for i in INDEX]
    ys = [torch.randn(len(i), 3, generator=g) for i in INDEX]

    def make() -> list[nn.Module]:
        torch.manual_seed(0)
        base = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
        return _perturbed_copies(
            base, LoraConfig(r=4, lora_alpha=8, target_modules=["0", "2"], init_lora_weights=False)
        )

    def row_losses(models: list[nn.Module]) -> list[torch.Tensor]:
        return [((m(x) - y) ** 2).sum(dim=1) for m, x, y in zip(models, xs, ys, strict=True)]

    return make, row_losses


def _gpt2_case() -> tuple[Callable[[], list[nn.Module]], RowLosses]:
    vocab = 40
    g = torch.Generator().manual_seed(2)
    tokens = [torch.randint(0, vocab, (len(i), 10), generator=g) for i in INDEX]

    def make() -> list[nn.Module]:
        torch.manual_seed(0)
        # Dropout off: the reference re-runs the forward once per patient and must see the same net.
        config = GPT2Config(
            vocab_size=vocab,
            n_positions=12,
            n_embd=16,
            n_layer=1,
            n_head=2,
            bos_token_id=0,
            eos_token_id=0,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )
        lora = LoraConfig(
            r=4,
            lora_alpha=8,
            target_modules=["c_attn", "c_proj"],
            fan_in_fan_out=True,
            init_lora_weights=False,
        )
        return _perturbed_copies(GPT2LMHeadModel(config), lora)

    def row_losses(models: list[nn.Module]) -> list[torch.Tensor]:
        losses = []
        for model, ids in zip(models, tokens, strict=True):
            logits = model(input_ids=ids).logits[:, :-1]
            per_token = F.cross_entropy(logits.reshape(-1, vocab), ids[:, 1:].reshape(-1), reduction="none")
            losses.append(per_token.reshape(len(ids), -1).sum(dim=1))
        return losses

    return make, row_losses


def _hand_step(
    models: list[nn.Module], row_losses: RowLosses, c: float, sigma: float, seed: int, b: float
) -> list:
    """Per-patient autograd, clip, sum, the keystream's noise (same draw order), divide: the reference."""
    flat = [p for m in models for p in m.parameters() if p.requires_grad]
    total = [torch.zeros_like(p) for p in flat]
    for patient in range(PATIENTS):
        loss = sum(
            losses[idx == patient].sum() for losses, idx in zip(row_losses(models), INDEX, strict=True)
        )
        grads = torch.autograd.grad(loss, flat)
        norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads))
        factor = min(1.0, c / float(norm))
        total = [s + factor * g for s, g in zip(total, grads, strict=True)]
    draws = module_noise(models, noise(seed))
    return [(s + sigma * c * z) / b for s, z in zip(total, draws, strict=True)]


@pytest.mark.parametrize("mode", ["ew", "hooks"])
@pytest.mark.parametrize("case", [_mlp_case, _gpt2_case], ids=["mlp", "gpt2"])
def test_dp_step_on_peft_lora_equals_the_hand_computation(case: Callable, mode: str) -> None:
    c, sigma, b, lr = 0.5, 0.8, 2.5, 0.1
    make, row_losses = case()
    models, reference = make(), make()
    for m in (*models, *reference):
        m.train()
    expected = _hand_step(reference, row_losses, c, sigma, seed=7, b=b)
    base_before = [
        {n: p.detach().clone() for n, p in m.named_parameters() if not p.requires_grad} for m in models
    ]

    dp = PatientDPSGD(models, c, sigma, b, noise(7), grad_sample_mode=mode)
    trainable = [p for ps in dp.trainable_parameters for p in ps]
    assert trainable and all("lora_" in n for m in models for n, p in m.named_parameters() if p.requires_grad)
    optimizer = torch.optim.SGD(trainable, lr=lr)
    lora_before = [p.detach().clone() for p in trainable]
    torch.stack([losses.sum() for losses in row_losses(dp.forward_modules)]).sum().backward()
    stats = dp.privatize(INDEX, num_patients=PATIENTS)
    optimizer.step()

    assert stats.clipped_fraction > 0  # the setting really exercises clipping
    for p, before, grad in zip(trainable, lora_before, expected, strict=True):
        assert torch.allclose(p.detach(), before - lr * grad, atol=1e-6, rtol=0)
        assert not torch.allclose(p.detach(), before)
    for m, before in zip(models, base_before, strict=True):
        for name, p in m.named_parameters():
            if not p.requires_grad:
                assert torch.equal(p, before[name]), name


def test_a_patient_with_five_visits_moves_the_sum_by_at_most_c() -> None:
    torch.manual_seed(3)
    copies = [nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 2)) for _ in range(5)]
    c = 0.7

    def clipped_sum(include_target: bool) -> torch.Tensor:
        models = copy.deepcopy(copies)
        dp = PatientDPSGD(models, c, 0.0, 1.0, noise(0))
        g = torch.Generator().manual_seed(11)
        slots = [torch.tensor([0, 1, 2]) if include_target else torch.tensor([1, 2]) for _ in range(5)]
        loss = torch.zeros(())
        for t, (model, idx) in enumerate(zip(dp.forward_modules, slots, strict=True)):
            x = torch.randn(3, 4, generator=g)[-len(idx) :]
            scale = torch.tensor([50.0, 1.0, 1.0])[-len(idx) :, None]  # the target's rows dominate
            loss = loss + (model(x * scale) ** 2).sum() * (t + 1)
        loss.backward()
        stats = dp.privatize(slots, num_patients=3)
        if include_target:
            assert stats.per_patient_norms[0] > 10 * c  # far outside the ball: clipping bites
        return torch.cat([p.grad.flatten() for ps in dp.trainable_parameters for p in ps])

    difference = torch.linalg.vector_norm(clipped_sum(True) - clipped_sum(False))
    assert difference <= c + 1e-5
    assert difference == pytest.approx(c, rel=1e-4)  # the whole patient, not one visit, was clipped


def test_the_clipped_fraction_is_of_the_sampled_patients_not_the_population() -> None:
    # 4 patients sampled out of a population of 40 (q = 0.1), every one of them clipped: the logged
    # share must read 100 % of the step's patients, not 4/40 = 10 % of everyone
    make, row_losses = _mlp_case()
    models = make()
    dp = PatientDPSGD(models, 1e-6, 0.0, 4.0, noise(3))
    torch.stack([losses.sum() for losses in row_losses(dp.forward_modules)]).sum().backward()
    stats = dp.privatize(INDEX, num_patients=10 * PATIENTS)
    assert stats.clipped_fraction == pytest.approx(1.0)
    assert stats.num_patients == 10 * PATIENTS and stats.sampled == PATIENTS
    # a step that sampled nobody clipped nobody (and does not divide by zero)
    empty = PatientDPSGD([nn.Linear(3, 2)], 1.0, 1.0, 1.0, noise(4))
    assert empty.privatize([None], num_patients=10).clipped_fraction == 0.0


def test_an_empty_batch_still_releases_noise() -> None:
    models = [nn.Linear(3, 2) for _ in range(2)]
    dp = PatientDPSGD(models, 1.0, 2.0, 4.0, noise(5))
    dp.privatize([None, torch.tensor([], dtype=torch.long)], num_patients=0)
    expected = module_noise(models, noise(5))
    for p, z in zip((p for m in models for p in m.parameters()), expected, strict=True):
        assert torch.equal(p.grad, z * 2.0 / 4.0)


def test_misuse_is_refused() -> None:
    shared = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="shared"):
        PatientDPSGD([nn.Sequential(shared), nn.Sequential(shared)], 1.0, 1.0, 1.0, noise(0))
    model = nn.Linear(2, 1)
    dp = PatientDPSGD([model], 1.0, 1.0, 1.0, noise(0), grad_sample_mode="hooks")
    model(torch.ones(3, 2)).sum().backward()
    with pytest.raises(ValueError, match="rows"):
        dp.privatize([torch.tensor([0, 1])], num_patients=2)
    with pytest.raises(ValueError, match="slots"):
        dp.privatize([torch.tensor([0, 1, 5])], num_patients=2)
    assert dp.event(0.1, 3) == PoissonSampledGaussian(0.1, 1.0, 3)
    dp.zero_grad()
    # A path around the hooked layer's forward (as in opacus#820-style breakages) reaches the
    # weights without per-row gradients: it must not become a silent noise-only step.
    F.linear(torch.ones(3, 2), model.weight, model.bias).sum().backward()
    with pytest.raises(RuntimeError, match="no per-row gradient"):
        dp.privatize([torch.tensor([0, 1, 1])], num_patients=2)
    dp.zero_grad()
    model.eval()  # Opacus' hooks skip eval-mode forwards; its backward hook then refuses
    with pytest.raises(ValueError, match="No activations"):
        model(torch.ones(3, 2)).sum().backward()
    # ExpandedWeights mode: a call to the plain module, not its wrapper, gets no per-row gradient
    model = nn.Linear(2, 1)
    dp = PatientDPSGD([model], 1.0, 1.0, 1.0, noise(0))
    model(torch.ones(3, 2)).sum().backward()
    with pytest.raises(RuntimeError, match="no per-row gradient"):
        dp.privatize([torch.tensor([0, 1, 1])], num_patients=2)
    dp.zero_grad()

    # a trainable parameter in an op without a per-row rule fails loudly, never silently
    class Scale(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(2))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.w

    (scaled,) = PatientDPSGD([Scale()], 1.0, 1.0, 1.0, noise(0)).forward_modules
    with pytest.raises(RuntimeError, match="cannot handle"):
        scaled(torch.ones(3, 2))
    # two forwards before one privatize would add one step's rows onto another's
    (wrapped,) = dp.forward_modules
    wrapped(torch.ones(3, 2)).sum().backward()
    with pytest.raises(RuntimeError, match="not cleared"):
        wrapped(torch.ones(3, 2))


def test_poisson_sample_rate_and_empty_batches() -> None:
    stream = noise(0)
    sizes = [len(poisson_sample(100, 0.05, stream)) for _ in range(400)]
    assert sum(sizes) / len(sizes) == pytest.approx(5.0, rel=0.1)
    assert len(poisson_sample(100, 0.0, stream)) == 0
    assert poisson_sample(10, 1.0, stream).tolist() == list(range(10))
    # patient i is in the step iff the stream's i-th uniform of this step is below q
    expected = torch.nonzero(noise(1).torch_random(100) < 0.3).flatten()
    assert torch.equal(poisson_sample(100, 0.3, noise(1)), expected)


def test_consecutive_steps_of_different_sizes_match_plain_gradients_without_clipping_or_noise() -> None:
    torch.manual_seed(4)
    models = [nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)) for _ in range(2)]
    dp = PatientDPSGD(models, 1e6, 0.0, 2.0, noise(0))
    for rows in (5, 2, 7):
        xs = [torch.randn(rows, 3), torch.randn(rows - 1, 3)]
        with dp.paused():  # the reference pass must leave no per-row state behind
            reference = sum((m(x) ** 2).sum() for m, x in zip(dp.forward_modules, xs, strict=True))
            plain = torch.autograd.grad(reference, [p for m in models for p in m.parameters()])
        sum((m(x) ** 2).sum() for m, x in zip(dp.forward_modules, xs, strict=True)).backward()
        dp.privatize([torch.arange(rows), torch.arange(rows - 1)], num_patients=rows)
        for p, g in zip((p for m in models for p in m.parameters()), plain, strict=True):
            assert torch.allclose(p.grad, g / 2.0, atol=1e-6)
        dp.zero_grad()


def test_every_opacus_mode_gives_the_same_private_gradient() -> None:
    """The benchmark picks the mode by speed; every mode must release the same gradient."""
    c, sigma, b = 0.5, 0.8, 2.5
    make, row_losses = _mlp_case()
    grads = []
    for mode in ("ew", "hooks", "functorch"):
        models = make()
        for m in models:
            m.train()
        dp = PatientDPSGD(models, c, sigma, b, noise(3), grad_sample_mode=mode)
        torch.stack([losses.sum() for losses in row_losses(dp.forward_modules)]).sum().backward()
        dp.privatize(INDEX, num_patients=PATIENTS)
        grads.append([p.grad.detach().clone() for ps in dp.trainable_parameters for p in ps])
    for ew_grad, hooks_grad, functorch_grad in zip(*grads, strict=True):
        assert torch.allclose(ew_grad, hooks_grad, atol=1e-6, rtol=0)
        assert torch.allclose(functorch_grad, hooks_grad, atol=1e-6, rtol=0)


@pytest.mark.parametrize("mode", ["ew", "hooks"])
def test_a_step_run_in_passes_releases_what_one_pass_releases(mode: str) -> None:
    """Memory only: the rows of a step split over passes (patient 0's rows in both passes and two
    copies, a copy run in one pass only) give the one-pass step's clipped, noised gradient."""
    g = torch.Generator().manual_seed(4)
    xs = [torch.randn(len(i), 6, generator=g) * 3 for i in INDEX]
    ys = [torch.randn(len(i), 3, generator=g) for i in INDEX]
    make, _ = _mlp_case()
    c, sigma, b = 0.5, 0.8, 2.5

    def step(passes: list[list[torch.Tensor | None]]) -> tuple[list[torch.Tensor], torch.Tensor]:
        models = make()
        dp = PatientDPSGD(models, c, sigma, b, noise(9), grad_sample_mode=mode)
        for k, rows_of in enumerate(passes):
            losses = [
                ((m(x[rows]) - y[rows]) ** 2).sum()
                for m, x, y, rows in zip(dp.forward_modules, xs, ys, rows_of, strict=True)
                if rows is not None
            ]
            torch.stack(losses).sum().backward()
            index = [None if rows is None else i[rows] for i, rows in zip(INDEX, rows_of, strict=True)]
            if k < len(passes) - 1:
                dp.accumulate(index, PATIENTS)
            else:
                stats = dp.privatize(index, PATIENTS)
        return [p.grad.clone() for ps in dp.trainable_parameters for p in ps], stats.per_patient_norms

    everything = [[torch.arange(len(i)) for i in INDEX]]
    split = [
        [torch.tensor([0, 1, 2]), torch.arange(4), None],  # patient 0: row 0 of copy 0, row 1 of copy 1
        [torch.tensor([3, 4]), None, torch.arange(3)],  # patient 0 again: row 4 of copy 0, copy 2
    ]
    one, norms_one = step(everything)
    two, norms_two = step(split)
    assert float(norms_one.max()) > c  # clipping bites, so a patient clipped per pass would differ
    assert torch.allclose(norms_one, norms_two, rtol=1e-6)
    for a, b_ in zip(one, two, strict=True):
        assert torch.allclose(a, b_, atol=1e-6, rtol=0)


def test_zero_grad_drops_a_step_half_accumulated() -> None:
    models = [nn.Linear(3, 2)]
    dp = PatientDPSGD(models, 1.0, 0.0, 1.0, noise(2))
    x = torch.randn(2, 3)
    dp.forward_modules[0](x).sum().backward()
    dp.accumulate([torch.tensor([0, 1])], 2)
    dp.zero_grad()  # e.g. a round that failed half way
    dp.privatize([None], 2)
    assert all(torch.equal(p.grad, torch.zeros_like(p)) for p in models[0].parameters())
