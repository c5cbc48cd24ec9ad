"""`PatientDPSGD.patient_gradients` and `clipped_row_sum`: the generic path a mechanism takes when it
releases a function of each patient's joint gradient (FedTAR's one-vector release) instead of the
gradient. With the identity as that function it must give exactly `privatize`'s clipped sum at
σ = 0: the same per-patient gradients over every copy, clipped jointly to C. A step with injected
canaries is refused (they are clipped by `privatize` only). Milliseconds."""

from __future__ import annotations

import pytest
import torch

from secure_fed.dp.dpsgd import PatientDPSGD, clipped_row_sum
from tests.dp.test_dpsgd import INDEX, PATIENTS, _mlp_case, noise

CLIP = 180.0  # the case's patients have joint norms of about 140-240: some clipped, some not


def _backward(engine: PatientDPSGD, row_losses) -> None:  # noqa: ANN001
    sum(loss.sum() for loss in row_losses(engine.forward_modules)).backward()


def test_the_identity_release_is_privatizes_clipped_sum() -> None:
    make, row_losses = _mlp_case()
    models = make()
    engine = PatientDPSGD(models, CLIP, 0.0, 1.0, noise(0))
    _backward(engine, row_losses)
    present, per_copy = engine.patient_gradients(INDEX, PATIENTS)
    assert present.tolist() == list(range(PATIENTS))
    assert all(block is not None and block.shape[0] == PATIENTS for block in per_copy)
    joint = torch.cat([block for block in per_copy if block is not None], dim=1)
    ours = clipped_row_sum(joint, CLIP)
    norms = torch.linalg.vector_norm(joint.double(), dim=1)
    assert (norms > CLIP).any() and (norms < CLIP).any(), "the clip must bind for some patients only"
    # a patient with no row in a copy has a zero block there (patient 2 has no visit 3)
    assert float(per_copy[2][2].abs().sum()) == 0.0

    reference = make()
    engine = PatientDPSGD(reference, CLIP, 0.0, 1.0, noise(0))
    _backward(engine, row_losses)
    engine.privatize(INDEX, PATIENTS)
    theirs = torch.cat([p.grad.reshape(-1) for m in reference for p in m.parameters() if p.requires_grad])
    torch.testing.assert_close(ours.float(), theirs.float(), rtol=1e-5, atol=1e-7)


def test_each_row_is_clipped_alone() -> None:
    rows = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(
        clipped_row_sum(rows, 1.0), torch.tensor([0.6 + 0.3, 0.8 + 0.4], dtype=torch.float64)
    )
    with pytest.raises(ValueError, match="clip must be > 0"):
        clipped_row_sum(rows, 0.0)


def test_injected_canaries_are_refused() -> None:
    make, row_losses = _mlp_case()
    engine = PatientDPSGD(make(), CLIP, 0.0, 1.0, noise(0))
    engine.injected = lambda: None
    _backward(engine, row_losses)
    with pytest.raises(RuntimeError, match="injected canaries"):
        engine.patient_gradients(INDEX, PATIENTS)
