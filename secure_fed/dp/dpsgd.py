"""Patient-level DP-SGD over any set of torch modules (Opacus per-row gradients, our clipping).

Opacus' own optimizer clips per *row*; our privacy unit is the patient, whose rows are spread
over T per-visit-index module copies. So Opacus only supplies per-row gradients (ExpandedWeights
mode by default, loss reduction "sum"), and this module sums them per patient across all modules,
clips each patient's joint gradient (over every trainable parameter of every module) to L2 ≤ C,
adds N(0, σ²C²) and divides by the expected batch size (Opacus' convention under Poisson
sampling: the divisor must not depend on the sampled batch).

Usage per step:
    batch = poisson_sample(n_patients, q, noise)          # patient ids in this step
    loss = Σ over rows of dp.forward_modules[t](rows_t)    # a SUM, not a mean
    loss.backward()
    dp.privatize([slot_of_row_for_module_t for t], num_patients=len(batch))
    optimizer.step(); dp.zero_grad()
Any other pass through the same modules (validation loss, hypergradients) goes inside `with dp.paused():`.

Randomness (Poisson sampling and noise) comes from a `NoiseStream`, an AES-256-CTR keystream under
a per-release key, never from a seeded statistical generator. Noise is drawn module by module in
the given order, one float64 draw per module covering its trainable parameters in
`named_parameters()` order, each rounded to the parameter dtype; a step is therefore reproducible
from the stream key (tests pin values that way), and from nothing else.

Per-patient clipping bounds a patient's influence only if each row's gradient depends on that row
alone. A layer that mixes the rows of a batch in its forward (BatchNorm in training mode, even a
frozen one: it normalises every row by the batch's statistics) breaks that: one patient then moves
every other patient's clipped gradient, and the sum by many times C
(tests/adversarial/test_dp_batchnorm.py). Construction therefore refuses such layers anywhere in
the modules, and runs Opacus' `ModuleValidator` on every module that owns trainable parameters.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.utils._expanded_weights.expanded_weights_impl import ExpandedWeight

from secure_fed.dp.events import PoissonSampledGaussian
from secure_fed.dp.keystream import NoiseStream


def _noise_source(noise: object) -> NoiseStream:
    if not isinstance(noise, NoiseStream):
        # a seeded generator's output is predictable from its seed (torch's CPU generator keeps only
        # 32 bits of it): no DP randomness may come from one
        raise TypeError(
            f"DP randomness must come from a NoiseStream (AES-CTR keystream), got {type(noise).__name__}"
        )
    return noise


def poisson_sample(n_patients: int, sampling_rate: float, noise: NoiseStream) -> torch.Tensor:
    """Indices of the patients in this step: each independently with probability q (may be empty)."""
    if n_patients < 0:
        raise ValueError(f"n_patients must be >= 0, got {n_patients}")
    if not 0 <= sampling_rate <= 1:
        raise ValueError(f"sampling_rate must lie in [0, 1], got {sampling_rate}")
    draws = _noise_source(noise).torch_random(n_patients)
    return torch.nonzero(draws < sampling_rate).flatten()


ROW_MIXING_FIX = (
    "keep every frozen BatchNorm in eval mode while training (ReportModel.train() does so for its "
    "frozen base; for another model call .eval() on those layers after .train()), or replace "
    "BatchNorm by GroupNorm or LayerNorm (opacus.validators.ModuleValidator.fix)"
)


def _row_mixing(module: nn.Module) -> bool:
    """Does this layer's forward mix the rows of a batch? BatchNorm does in training mode, and
    always when it keeps no running statistics (it then uses the batch's even in eval mode)."""
    return isinstance(module, _BatchNorm) and (module.training or not module.track_running_stats)


def check_modules(modules: Sequence[nn.Module]) -> list[tuple[str, nn.Module]]:
    """Refuse modules on which per-patient clipping would not bound a patient's influence; returns
    the batch-normalisation layers (all in eval mode), which must stay so for every step.

    Every layer is checked for row mixing, frozen or not (a frozen BatchNorm in training mode still
    normalises by the batch); every layer owning trainable parameters also goes through Opacus'
    `ModuleValidator` (e.g. trainable BatchNorm, LSTM, nn.MultiheadAttention, eval mode).
    """
    problems: list[str] = []
    batch_norms: list[tuple[str, nn.Module]] = []
    for t, module in enumerate(modules):
        for name, sub in module.named_modules():
            where = f"modules[{t}]" + (f".{name}" if name else "") + f" ({type(sub).__name__})"
            if _row_mixing(sub):
                problems.append(
                    f"{where} normalises each row by the statistics of the whole batch "
                    f"({'training mode' if sub.training else 'track_running_stats=False'}), so one "
                    "patient's gradient depends on the other patients' rows"
                )
            elif isinstance(sub, _BatchNorm):
                batch_norms.append((where, sub))
            if any(p.requires_grad for p in sub.parameters(recurse=False)):
                from opacus.validators import ModuleValidator  # Opacus on first use (accountants.py)

                problems.extend(f"{where}: {error}" for error in ModuleValidator.validate(sub, strict=False))
    if problems:
        raise ValueError(
            "per-patient clipping cannot bound a patient's influence on these modules:\n  - "
            + "\n  - ".join(problems)
            + f"\nFix: {ROW_MIXING_FIX}."
        )
    return batch_norms


@contextlib.contextmanager
def expanded_weights(
    slots: Sequence[tuple[nn.Module, str, torch.Tensor]], batch_size: int, loss_reduction: str = "sum"
) -> Iterator[None]:
    """For the forwards inside: each `owner`'s parameter `name` is torch's ExpandedWeight over the
    given tensor (the parameter itself, or another value of it the module is to be run at), so the
    backward leaves each row's gradient in that tensor's `grad_sample`. The parameters are put back
    after, whatever happens."""
    saved = [owner._parameters[name] for owner, name, _ in slots]
    try:
        for owner, name, tensor in slots:
            owner._parameters[name] = ExpandedWeight(tensor, batch_size, loss_reduction)
        yield
    finally:
        for (owner, name, _), param in zip(slots, saved, strict=True):
            owner._parameters[name] = param


def row_gradients(params: Sequence[torch.Tensor], rows: int) -> torch.Tensor:
    """The per-row gradients left in `params` as a single (rows, P) matrix, the parameters flattened
    side by side in order; zeros for a parameter that took no part in the loss.

    One matrix, not one tensor per parameter, keeps the per-patient sum, the norms and the clipped
    sum to a handful of large operations: with dozens of small LoRA and hypernetwork tensors per
    copy, per-tensor bookkeeping costs more than the arithmetic.
    """
    blocks = []
    for param in params:
        grad_sample = getattr(param, "grad_sample", None)
        if grad_sample is None:
            if param.grad is not None:
                # Autograd reached the parameter but not its per-row rule (module in eval mode under
                # hooks, a forward under no_grad, or a path around the hooked layer): using zero here
                # would silently train on noise alone.
                raise RuntimeError(
                    "a trainable parameter got a gradient but no per-row gradient; run the modules "
                    "in train mode through their own forward, and call zero_grad() between steps"
                )
            blocks.append(param.new_zeros((rows, param.numel())))  # took no part in this loss
            continue
        if isinstance(grad_sample, list):
            raise RuntimeError(
                "several backward passes were accumulated before privatize(); "
                "run one backward of the summed loss per step"
            )
        if grad_sample.shape[0] != rows:
            raise ValueError(f"patient index has {rows} rows but the module saw {grad_sample.shape[0]} rows")
        blocks.append(grad_sample.reshape(grad_sample.shape[0], -1))
    return torch.cat(blocks, dim=1)


@functools.cache
def _expanded_weights_module() -> type[nn.Module]:
    """`ExpandedWeightsModule`, defined on first use: its base class is Opacus' (accountants.py says
    why Opacus is not imported with the package)."""
    from opacus.grad_sample.gsm_exp_weights import GradSampleModuleExpandedWeights

    class ExpandedWeightsModule(GradSampleModuleExpandedWeights):
        """Opacus' "ew" mode: torch's ExpandedWeights compute each row's gradient inside the backward
        of every op that uses a trainable parameter, with no module hooks, and autograd skips the
        summed weight gradient that DP-SGD discards anyway.

        Opacus' forward goes through `torch.func.functional_call`, which walks every named module,
        parameter and buffer of the model on every call; for a ViT+GPT-2 with peft adapters that walk
        cost more than the per-row gradients (benchmarks/dp_overhead.py). The trainable parameters'
        owners are found once here instead, and only those parameters are swapped per call. Call this
        wrapper, not the wrapped module: the plain module computes ordinary gradients only. A trainable
        parameter used by an op ExpandedWeights has no per-row rule for (anything but linear, conv,
        embedding and the norm layers) raises at the forward; it is never silently skipped.
        """

        def __init__(self, m: nn.Module, *, loss_reduction: str = "sum") -> None:
            super().__init__(m, batch_first=True, loss_reduction=loss_reduction)
            self._slots = [
                (owner, name, param)
                for owner in m.modules()
                for name, param in owner._parameters.items()
                if param is not None and param.requires_grad
            ]
            self._recording = True

        def forward(self, *args: object, **kwargs: object) -> torch.Tensor:
            if not self._recording:
                return self._module(*args, **kwargs)
            first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
            if first is None:
                raise RuntimeError("no tensor argument to take the batch size from")
            batch_size = first.shape[0]  # batch first, as every module here
            for _, _, param in self._slots:
                if getattr(param, "grad_sample", None) is not None:
                    # ExpandedWeights would add this forward's rows onto the last step's
                    raise RuntimeError(
                        "per-row gradients of an earlier step were not cleared; call zero_grad()"
                    )
            with expanded_weights(self._slots, batch_size, self.loss_reduction):
                return self._module(*args, **kwargs)

        def disable_hooks(self) -> None:
            self._recording = False

        def enable_hooks(self) -> None:
            self._recording = True

    return ExpandedWeightsModule


def __getattr__(name: str) -> object:
    if name == "ExpandedWeightsModule":
        return _expanded_weights_module()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class StepStats:
    per_patient_norms: torch.Tensor  # [num_patients] joint L2 norms before clipping
    # of the step's sampled patients (those with a row), not the population: at q = 0.1 a share
    # of the population would read ten times too low
    clipped_fraction: float
    num_patients: int
    sampled: int = 0  # patients with a row in this step


def clipped_row_sum(rows: torch.Tensor, clip: float) -> torch.Tensor:
    """Σ_i min(1, C/‖rows[i]‖)·rows[i] in float64: every row (one patient's released vector) clipped
    to L2 norm ≤ C as one vector, then summed; no noise. One patient moves the sum by at most C."""
    if not clip > 0:
        raise ValueError(f"clip must be > 0, got {clip}")
    rows = rows.double()
    norms = torch.linalg.vector_norm(rows, dim=1)
    factors = clip / torch.clamp(norms, min=clip)
    return factors @ rows


class PatientDPSGD:
    def __init__(
        self,
        modules: Sequence[nn.Module],
        max_grad_norm: float,
        noise_multiplier: float,
        expected_batch_size: float,
        noise: NoiseStream,
        grad_sample_mode: str = "ew",
    ) -> None:
        if not max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be > 0, got {max_grad_norm}")
        if not noise_multiplier >= 0:
            raise ValueError(f"noise_multiplier must be >= 0, got {noise_multiplier}")
        if not expected_batch_size > 0:
            raise ValueError(f"expected_batch_size (q × n_patients) must be > 0, got {expected_batch_size}")
        self.max_grad_norm = float(max_grad_norm)
        self.noise_multiplier = float(noise_multiplier)
        self.expected_batch_size = float(expected_batch_size)
        self.noise = _noise_source(noise)
        if grad_sample_mode not in ("ew", "hooks", "functorch"):
            raise ValueError(
                f"grad_sample_mode must be 'ew', 'hooks' or 'functorch', got {grad_sample_mode!r}"
            )
        self.modules = list(modules)
        self._batch_norms = check_modules(self.modules)
        self.grad_sample_mode = grad_sample_mode
        # Three Opacus modes, same per-row gradients (tests/dp/test_dpsgd.py), chosen by
        # benchmarks/dp_overhead.py: "ew" (ExpandedWeights) is the fastest here. "hooks" (Opacus'
        # hand-written per-layer samplers) and "functorch" (torch.func per layer) hook the modules'
        # own sub-layers, so with them callers may keep calling the unwrapped modules.
        from opacus.grad_sample import GradSampleModule  # Opacus on first use (accountants.py)

        self.wrapped: list[nn.Module] = [
            _expanded_weights_module()(m, loss_reduction="sum")
            if grad_sample_mode == "ew"
            else GradSampleModule(
                m,
                batch_first=True,
                loss_reduction="sum",
                strict=True,
                force_functorch=grad_sample_mode == "functorch",
            )
            for m in modules
        ]
        self.trainable_parameters: list[list[nn.Parameter]] = [
            [p for _, p in m.named_parameters() if p.requires_grad] for m in self.modules
        ]
        seen: set[int] = set()
        for params in self.trainable_parameters:
            for p in params:
                # One tensor in two modules would get two gradients and be clipped twice over.
                if id(p) in seen:
                    raise ValueError(
                        "a trainable parameter is shared between modules; give each copy its own"
                    )
                seen.add(id(p))
        if not seen:
            raise ValueError("the modules have no trainable parameters")
        self._sizes = [[p.numel() for p in params] for params in self.trainable_parameters]
        # Opacus' hooks leave activations on every hooked sub-layer; ExpandedWeights keep them in
        # the autograd graph, so that mode has nothing to walk after a step.
        self._submodules = (
            [] if grad_sample_mode == "ew" else [sub for m in self.modules for sub in m.modules()]
        )
        # Privacy audits only (secure_fed.dp.canaries): called once per step, it returns extra
        # "patients" whose gradients are given, not computed — per module a (k, P_t) matrix in the
        # layout of `_row_gradients` (or None) — which are then clipped, summed and noised exactly
        # like the real patients. Never set in training.
        self.injected: Callable[[], Sequence[torch.Tensor | None] | None] | None = None
        # Per module, the step's passes so far (`accumulate`): each a (patients, P) matrix of
        # per-patient gradient sums and those patients' slots.
        self._passes: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in self.modules]

    @property
    def forward_modules(self) -> list[nn.Module]:
        """What the training loop must call for its rows to get per-row gradients."""
        return self.wrapped if self.grad_sample_mode == "ew" else self.modules

    def event(self, sampling_rate: float, steps: int) -> PoissonSampledGaussian:
        """The ledger event for `steps` steps at Poisson rate `sampling_rate`."""
        return PoissonSampledGaussian(sampling_rate, self.noise_multiplier, steps)

    def _row_gradients(self, params: list[nn.Parameter], index: torch.Tensor | None) -> torch.Tensor | None:
        """One module's per-row gradients (`row_gradients`); None for a module that saw no rows this
        step."""
        if index is None or index.numel() == 0:
            return None  # module not run this step: no patient touched it
        return row_gradients(params, index.shape[0])

    def accumulate(self, patient_index: Sequence[torch.Tensor | None], num_patients: int) -> None:
        """Fold the per-row gradients of the backward just run into this step's per-patient sums and
        clear them, so that the step's next forward/backward pass can run: a step over many patients
        then needs the memory of one pass, not of all its rows at once. `privatize` ends the step
        (with the last pass's index); the clipping, the noise and the result do not depend on how
        the patients were split into passes, and a patient whose rows fall in several passes is
        clipped on the sum of them all. Arguments as for `privatize`."""
        if len(patient_index) != len(self.modules):
            raise ValueError(f"{len(patient_index)} patient index tensors for {len(self.modules)} modules")
        for index in patient_index:
            if index is not None and index.numel():
                if int(index.min()) < 0 or int(index.max()) >= num_patients:
                    raise ValueError(f"patient slots must lie in [0, {num_patients})")
        for t, (params, index) in enumerate(zip(self.trainable_parameters, patient_index, strict=True)):
            rows = self._row_gradients(params, index)
            if rows is None:
                continue
            assert index is not None
            slots = index.cpu()
            patients, inverse = torch.unique(slots, return_inverse=True)
            if len(patients) < len(slots):
                # a patient with several rows in this module: sum them now (the norm is of the sum),
                # and only one row per patient is kept until the step ends
                rows = rows.new_zeros((len(patients), rows.shape[1])).index_add_(
                    0, inverse.to(rows.device), rows
                )
                slots = patients
            self._passes[t].append((rows, slots))
        self._clear_grad_samples()

    def _end_passes(
        self, patient_index: Sequence[torch.Tensor | None], num_patients: int
    ) -> tuple[list[list[tuple[torch.Tensor, torch.Tensor]]], torch.Tensor, torch.Tensor]:
        """Take the step's last pass and hand over every pass's (rows, slots) per module, with the
        patients present this step (increasing) and each slot's compact index (−1 if absent).

        Only the patients in this step get a row: slots are dense over the whole population, of
        which Poisson sampling picks a fraction q. Absent patients have a zero gradient (norm 0,
        nothing to clip or sum), so leaving them out changes no result, only the work."""
        self._check_row_mixing()
        self.accumulate(patient_index, num_patients)
        passes, self._passes = self._passes, [[] for _ in self.modules]
        seen = [slots for module in passes for _, slots in module]
        present = torch.unique(torch.cat(seen)) if seen else torch.zeros(0, dtype=torch.long)
        compact = torch.full((num_patients,), -1, dtype=torch.long)
        compact[present] = torch.arange(len(present))
        return passes, present, compact

    def privatize(self, patient_index: Sequence[torch.Tensor | None], num_patients: int) -> StepStats:
        """Replace every trainable parameter's `.grad` with the clipped, noised, scaled patient sum
        over this step's passes (`accumulate`), the last of which left its per-row gradients now.

        `patient_index[t][row]` is the patient slot (0..num_patients-1) of row `row` of module t's
        batch; None (or empty) for a module that saw no rows this step.
        """
        passes, present, compact = self._end_passes(patient_index, num_patients)
        # Per module: a (k, P) matrix of gradients and the patient (compact slot) of each row, such
        # that a patient's gradient for the module is the sum of its rows. Modules are disjoint
        # blocks of parameters, so a patient's squared joint norm is the sum over modules.
        per_patient: list[tuple[torch.Tensor, torch.Tensor] | None] = []
        extra = self.injected() if self.injected is not None else None
        n_extra = next((len(e) for e in extra or () if e is not None), 0)
        squared = torch.zeros(len(present) + n_extra, dtype=torch.float64)
        for module_passes in passes:
            if not module_passes:
                per_patient.append(None)
                continue
            if len(module_passes) == 1:  # each patient once: `accumulate` summed its rows
                rows, slots = module_passes[0][0], compact[module_passes[0][1]]
            else:
                # a patient may be in several passes: the sum of its passes is its gradient
                first = module_passes[0][0]
                rows = first.new_zeros((len(present), first.shape[1]))
                for part, part_slots in module_passes:
                    rows.index_add_(0, compact[part_slots].to(rows.device), part)
                slots = torch.arange(len(present))
            # float32 row norms (a float64 reduction costs 5x as much), squared and summed in float64
            squared.index_add_(0, slots, torch.linalg.vector_norm(rows, dim=1).to(torch.float64).cpu() ** 2)
            per_patient.append((rows, slots))
        if extra is not None:
            self._add_injected(extra, per_patient, squared, len(present))
        # C / max(‖g‖, C) = min(1, C/‖g‖) without dividing by zero for an all-zero gradient.
        factors = self.max_grad_norm / torch.clamp(squared.sqrt(), min=self.max_grad_norm)
        norms = torch.zeros(num_patients, dtype=torch.float64)
        norms[present] = squared[: len(present)].sqrt()
        std = self.noise_multiplier * self.max_grad_norm
        for params, sizes, module_rows in zip(
            self.trainable_parameters, self._sizes, per_patient, strict=True
        ):
            # One draw per module, in the documented order, into one flat buffer; the module's
            # gradients are then a few whole-buffer operations and each `.grad` a view of the
            # result. torch.split makes every slice in one call.
            if not params:
                continue
            first = params[0]
            noise = self.noise.torch_standard_normal(sum(sizes), first.dtype)
            grads = noise.to(first.device).mul_(std)
            if module_rows is not None:
                rows, slots = module_rows
                grads += factors[slots].to(rows.device, rows.dtype) @ rows  # Σ_rows factor(patient)·row
            grads /= self.expected_batch_size
            for p, piece in zip(params, torch.split(grads, sizes), strict=True):
                p.grad = piece.view(p.shape)
        self._clear_grad_samples()
        sampled = len(present)
        clipped = float((norms[present] > self.max_grad_norm).double().mean()) if sampled else 0.0
        return StepStats(
            per_patient_norms=norms, clipped_fraction=clipped, num_patients=num_patients, sampled=sampled
        )

    def patient_gradients(
        self, patient_index: Sequence[torch.Tensor | None], num_patients: int
    ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """End the step with each sampled patient's own gradient, neither clipped nor noised: (the
        patients' slots, increasing; per module a (len(slots), P_t) matrix whose row i is patient
        slots[i]'s gradient over all its rows in that module, zero where it had none, or None for a
        module no patient reached). Arguments as for `privatize`.

        For a mechanism that releases a function of each patient's joint gradient and clips that
        (`clipped_row_sum`) instead of the gradient itself: the clipping then bounds what the
        patient moves the release by, and the caller states that sensitivity. Canaries
        (`injected`) are clipped and summed by `privatize` only, so a step with them is refused."""
        if self.injected is not None:
            raise RuntimeError("injected canaries go through privatize, not patient_gradients")
        passes, present, compact = self._end_passes(patient_index, num_patients)
        out: list[torch.Tensor | None] = []
        for module_passes in passes:
            if not module_passes:
                out.append(None)
                continue
            first = module_passes[0][0]
            rows = first.new_zeros((len(present), first.shape[1]))
            for part, part_slots in module_passes:
                rows.index_add_(0, compact[part_slots].to(rows.device), part)
            out.append(rows)
        self._clear_grad_samples()
        return present, out

    def _check_row_mixing(self) -> None:
        for where, norm in self._batch_norms:
            if norm.training:  # e.g. a later .train() on the plain nn.Module: this step mixed rows
                raise RuntimeError(
                    f"{where} was switched to training mode after PatientDPSGD checked it, so this "
                    f"step's per-patient gradients depend on other patients' rows. Fix: {ROW_MIXING_FIX}."
                )

    def _add_injected(
        self,
        extra: Sequence[torch.Tensor | None],
        per_patient: list[tuple[torch.Tensor, torch.Tensor] | None],
        squared: torch.Tensor,
        first_slot: int,
    ) -> None:
        """Give the injected patients the compact slots after the real ones, module by module, so
        that the one clipping, summing and noising below treats them as any other patient."""
        if len(extra) != len(self.modules):
            raise ValueError(f"{len(extra)} injected gradient blocks for {len(self.modules)} modules")
        for t, block in enumerate(extra):
            if block is None or not len(block):
                continue
            params = self.trainable_parameters[t]
            if block.shape[1:] != (sum(self._sizes[t]),):
                raise ValueError(f"injected gradients of module {t} must be (k, {sum(self._sizes[t])})")
            if len(block) != len(squared) - first_slot:
                raise ValueError("every module's injected block must hold the same patients")
            block = block.to(params[0].device, params[0].dtype)
            slots = first_slot + torch.arange(len(block))
            squared.index_add_(0, slots, torch.linalg.vector_norm(block, dim=1).to(torch.float64).cpu() ** 2)
            current = per_patient[t]
            per_patient[t] = (
                (block, slots)
                if current is None
                else (torch.cat([current[0], block]), torch.cat([current[1], slots]))
            )

    def _clear_grad_samples(self) -> None:
        hooks = self.grad_sample_mode != "ew"
        for params in self.trainable_parameters:
            for p in params:
                p.grad_sample = None
                if hooks:
                    # A forward whose output never reached the loss leaves Opacus' bookkeeping
                    # behind; stale activations would be paired with the next step's backprops.
                    p._forward_counter = 0
                    if hasattr(p, "_current_grad_sample"):
                        del p._current_grad_sample
        for sub in self._submodules:
            # plain attributes live in __dict__; hasattr on a Module would go through its slow
            # __getattr__ for every one of the thousands of submodules, every step
            sub.__dict__.pop("activations", None)
            sub.__dict__.pop("max_batch_len", None)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Run the modules without per-row bookkeeping (validation losses, hypergradients, evaluation):
        a forward or backward outside a DP step would otherwise leave activations that Opacus
        pairs with the next step's backward."""
        for wrapped in self.wrapped:
            wrapped.disable_hooks()  # type: ignore[operator]
        try:
            yield
        finally:
            for wrapped in self.wrapped:
                wrapped.enable_hooks()  # type: ignore[operator]

    def zero_grad(self) -> None:
        for params in self.trainable_parameters:
            for p in params:
                p.grad = None
        self._passes = [[] for _ in self.modules]
        self._clear_grad_samples()

    def close(self) -> list[nn.Module]:
        """Remove Opacus' hooks and attributes; returns the plain modules."""
        return [wrapped.to_standard_module() for wrapped in self.wrapped]  # type: ignore[operator]
