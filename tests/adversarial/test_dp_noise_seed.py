"""Attack: recover or collide a site's DP noise through a short generator seed.

The old derivation seeded torch's CPU generator with 64 bits of SHA-256(noise key ‖ purpose:round);
torch keeps only the low 32 of them. Two sites' keys then collide after ~2^16 tries (birthday), and
a server holding a released update can test all 2^32 seeds offline. Noise must now come from an
AES-256-CTR keystream under a per-release key (HKDF over the site secret and fresh OS randomness),
so neither a colliding key nor the site secret itself reproduces a release's noise.
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn

from secure_fed.site.private import SitePrivacy

LOW_32 = 0xFFFFFFFF


def old_seed(noise_key: bytes, purpose: str = "dpsgd", round_id: int = 1) -> int:
    """The seed the old `SitePrivacy._generator` gave torch."""
    return int.from_bytes(hashlib.sha256(noise_key + f"{purpose}:{round_id}".encode()).digest()[:8], "big")


def colliding_keys() -> tuple[bytes, bytes]:
    """Two distinct 32-byte noise keys whose old seeds agree in the low 32 bits (~0.2 s)."""
    seen: dict[int, bytes] = {}
    counter = 0
    while True:
        key = hashlib.sha256(b"noise-key-candidate" + counter.to_bytes(8, "big")).digest()
        low = old_seed(key) & LOW_32
        if low in seen:
            return seen[low], key
        seen[low] = key
        counter += 1


def site(noise_key: bytes) -> SitePrivacy:
    return SitePrivacy(
        site="site0",
        sampling_rate=0.25,
        clip=1.0,
        sigma=1.0,
        steps=4,
        histogram_sigma=10.0,
        alpha_clip=1.0,
        alpha_sigma=1.0,
        delta={"train": 1e-5, "validation": 1e-5},
        budget=8.0,
        n_patients={"train": 40, "validation": 10},
        noise_key=noise_key,
    )


def released_noise(privacy: SitePrivacy, round_id: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(Poisson sample of 2000 patients, the noise of an empty DP-SGD step) from the site's own
    round-`round_id` DP-SGD randomness, exactly as its training loop draws them."""
    gradients = privacy.gradients(round_id)
    sample = gradients.sample(2000)
    torch.manual_seed(0)
    model = nn.Linear(64, 16)
    gradients.wrap([model])
    assert gradients.engine is not None
    gradients.engine.privatize([None], num_patients=0)  # no patient: the update is noise alone
    assert model.weight.grad is not None and model.bias.grad is not None
    return sample, torch.cat([model.weight.grad.flatten(), model.bias.grad])


def test_torch_keeps_only_32_bits_of_the_old_seed() -> None:
    """The premise of the attack, checked on the torch in use."""
    a, b = colliding_keys()
    assert a != b and old_seed(a) != old_seed(b) and old_seed(a) & LOW_32 == old_seed(b) & LOW_32
    draws = [torch.randn(64, generator=torch.Generator().manual_seed(old_seed(k))) for k in (a, b)]
    assert torch.equal(draws[0], draws[1])


def test_keys_colliding_under_the_old_seed_give_different_noise() -> None:
    a, b = colliding_keys()
    sample_a, noise_a = released_noise(site(a))
    sample_b, noise_b = released_noise(site(b))
    assert not torch.equal(noise_a, noise_b)
    assert not torch.equal(sample_a, sample_b)
    # Not merely different: unrelated. Independent draws correlate at 0 ± 1/√1040 ≈ 0.03.
    correlation = torch.corrcoef(torch.stack([noise_a, noise_b]))[0, 1]
    assert abs(float(correlation)) < 0.2


def test_the_site_secret_alone_does_not_reproduce_a_release() -> None:
    """Whoever later learns the noise key (a leaked backup, a seized site) cannot regenerate the
    noise of a past release: each release key also mixes in fresh OS randomness."""
    (key, _) = colliding_keys()
    first_sample, first = released_noise(site(key))
    again_sample, again = released_noise(site(key))
    assert not torch.equal(first, again)
    assert not torch.equal(first_sample, again_sample)
