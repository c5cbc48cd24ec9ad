"""Distributed DP, one package: each site adds an integer share of Skellam noise to its rotated,
rounded sum, and the server decodes the survivors' ring sum.

The interface is `DistributedSum` (interface.py), built from the run's plan and the round's seed
(`DistributedSum.for_round(cfg, dim, n_sites, round_id)`): `.encode(site_sum, keystream)` gives a
site's `Share` (its ring vector and its secret layer seeds), `.freed_layers(m)` the layers m
confirmed survivors free, `.accepted_reveals(...)` and `.decode(ring_sum, accepted)` the released
float sum, `.plan` / `.digest` / `.bits` / `.length` the public numbers (SecAgg+ masks and sums on
the ring of `.bits` bits; this package imports nothing of crypto). The modules, by job: plan.py
(`DistributedPlan`, `plan_distributed`: calibration and ring sizing), sizing.py (its solvers),
run.py (the run's plan from the config, derived by every party), rotation.py, encode.py,
survivors.py (the survivor top-up), decode.py.

The mechanism (one private round = one DP step over the union of the sites' patients):

1. a site projects its clipped sum S (the sum of its sampled patients' gradients, each clipped to
   L2 norm C) onto the ball of radius `site_bound` (a projection is 1-Lipschitz, so one patient
   still moves it by at most C) and scales it by 1/γ;
2. pads it to D coordinates (a whole number of blocks of B = min(ROTATION_BLOCK, 2^⌈log₂ d⌉),
   B a power of two) and rotates each block, y = H·diag(s)·x / √B with H the B×B Walsh–Hadamard
   matrix and s public random signs derived from the round's seed (the same at every site and the
   server, so the rotations of the sites' vectors sum to the rotation of their sum). Blocks keep
   the padding below one block (68k coordinates pad to 69,632, not 131,072) and the transform
   cache-sized; the rotation is orthogonal either way, which is all the accounting uses;
3. rounds each coordinate at random, floor(y + U) with U uniform on [0, 1) (unbiased);
4. adds Skellam noise Poisson(share_mu/2) − Poisson(share_mu/2) per coordinate, and reduces mod
   2^bits. Sums of independent Skellam variables are Skellam, so the honest sites' shares add up to
   exactly the Skellam noise the accounting assumes; `share_mu = mu_total / (h − c)` so that the
   h − c honest sites among any h survivors carry all of it, whatever c colluders remove.

The server's unmasked sum is decoded by centring the residues, inverting the rotation and
multiplying by γ.

Sensitivity after rounding (what the accounting charges). Kairouz, Liu & Steinke (2021) round each
*unit's* vector and reject roundings whose norm exceeds a bound (conditional rounding), which
bounds that unit's contribution. Here a site rounds the *sum* of many patients' vectors, so the
norm of its rounded vector says nothing about one patient's influence; conditional rounding would
bound the wrong quantity and is not used. Instead: couple the roundings of neighbouring sums S and
S + g through the same uniforms U. Then v = floor(y' + U) − floor(y + U) has |v_i| < |y'_i − y_i| + 1
coordinate-wise, so ‖v‖₂ < ‖g‖₂/γ + √D on every coupled pair, and since Rényi divergence is jointly
quasi-convex the mixture over U is no worse than the worst pair. Hence

    Δ₂ = C/γ + √D + slack,    Δ₁ = min(√D·Δ₂, Δ₂²)

(Δ₁ ≤ Δ₂² because v is an integer vector). The slack (events.ROUNDING_FLOAT_SLACK, one unit)
covers float64 rotation error, kept far below one unit by bounding the scaled site norm by
MAX_SCALED_NORM. γ is chosen as fine as the ring allows, so the inflation √D·γ/C is small
whenever the ring has bits to spare; the plan refuses inflations above MAX_INFLATION.

Wrap-around of the ring is post-processing of the integer sum, so it costs accuracy, never
privacy; γ is sized so that `max_sites` sites' vectors (whatever they are, at norm ≤ site_bound),
roundings and noise shares stay inside [−2^(bits−1), 2^(bits−1)), the noise except with
probability WRAP_TAIL per round (a Chernoff bound and a union bound over coordinates).

Accounting: the Skellam mechanism's RDP (Agarwal, Kairouz & Liu 2021, Thm. for the
multi-dimensional mechanism with Sk(μ/2, μ/2) noise of variance μ per coordinate)

    ε(α) ≤ α·Δ₂²/(2μ) + min( ((2α − 1)·Δ₂² + 6·Δ₁) / (4μ²), 3·Δ₁/(2μ) ),

amplified by Poisson sampling of patients at rate q, composed over steps, and converted to (ε, δ)
as the project's RDP accountant does (Balle et al. 2020). Two amplification bounds
(`SKELLAM_AMPLIFICATIONS`), both at integer orders (computed in dp/skellam.py, which the accountant
prices a logged Skellam sum with):

- "symmetric" (what plans use): the exact binomial expansion of E_P[((1 − q) + q·L)^α], the form
  Mironov, Talwar & Zhang (2019) use for the sampled Gaussian. It needs the reverse direction
  D_α(P || (1 − q)P + qQ) to be no larger, which holds for every *symmetric* pair (an involution T
  with P∘T = Q and Q∘T = P); a Skellam vector and its shift by any v are such a pair (T(x) = v − x).
  Proof in docs/THREAT_MODEL.md, "Why the Skellam sum is amplified like the Gaussian", checked
  against exact divergences in tests/dp/test_symmetric_amplification.py.
- "general": Zhu & Wang (2019), Thm. 6, valid for any base mechanism, a factor 3 on the terms of
  order ≥ 3. Logs written before the symmetric bound existed carry no `amplification` key and are
  priced with it, so their logged ε still re-derives.

No PLD/PRV accountant prices the sum: its pairs have no dominating pair we can prove (docs/THREAT_MODEL.md,
"Why the Skellam sum keeps RDP"; dp/skellam_gdp.py measures what one would be worth).

Pure numpy/math (and secure_fed.config): imports nothing of clients, server, crypto or Flower.
"""

from __future__ import annotations

from secure_fed.dp.distributed.decode import centre, decode_sum, remove_layers
from secure_fed.dp.distributed.encode import encode_layered_share, encode_share
from secure_fed.dp.distributed.interface import DistributedSum, Reveal, Share
from secure_fed.dp.distributed.plan import (
    MAX_INFLATION,
    MAX_POISSON_LAMBDA,
    MAX_SCALED_NORM,
    WRAP_TAIL,
    DistributedPlan,
    distributed_epsilon,
    plan_distributed,
)
from secure_fed.dp.distributed.rotation import ROTATION_BLOCK, padded_size, rotate, rotation_block, unrotate
from secure_fed.dp.distributed.run import (
    NoiseComparison,
    check_honest_min,
    compare_noise,
    plan_digest,
    plan_for,
    round_seed,
    site_mode_warning,
)
from secure_fed.dp.distributed.sizing import rdp_to_epsilon
from secure_fed.dp.distributed.survivors import (
    SEED_BYTES,
    TOP_RUNGS,
    base_variance,
    check_survivors,
    kept_variance,
    layer_noise,
    layers_for,
    removable_layers,
    rungs,
    sized_for,
)

__all__ = [
    "MAX_INFLATION",
    "MAX_POISSON_LAMBDA",
    "MAX_SCALED_NORM",
    "ROTATION_BLOCK",
    "SEED_BYTES",
    "TOP_RUNGS",
    "WRAP_TAIL",
    "DistributedPlan",
    "DistributedSum",
    "NoiseComparison",
    "Reveal",
    "Share",
    "base_variance",
    "centre",
    "check_honest_min",
    "check_survivors",
    "compare_noise",
    "decode_sum",
    "distributed_epsilon",
    "encode_layered_share",
    "encode_share",
    "kept_variance",
    "layer_noise",
    "layers_for",
    "padded_size",
    "plan_digest",
    "plan_distributed",
    "plan_for",
    "rdp_to_epsilon",
    "remove_layers",
    "removable_layers",
    "rotate",
    "rotation_block",
    "round_seed",
    "rungs",
    "site_mode_warning",
    "sized_for",
    "unrotate",
]
