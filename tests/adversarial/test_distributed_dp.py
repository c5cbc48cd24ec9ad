"""Distributed DP inside SecAgg+ (dp.noise = "distributed"): each site's upload carries only a share
of the noise, so who must survive, and what one upload shows, are privacy questions.

(a) A server that declares honest sites dropped, to unmask a sum with fewer than h sites' shares in
it (less noise than the accounting assumes), gets no secret that unmasks anything: a site signs no
survivor set below h (naming h and the set it was shown), and answers no unmask request without
the round's signed survivor set (tests/adversarial/test_survivor_views.py: sites shown different
sets).
(b) One site's masked upload, as the server holds it, looks uniform over the ring, and the share
under the masks carries that site's own noise share (measured).
(c) The sum minus any c colluding sites' shares (they know their own noise and signal and subtract
them) still carries noise of variance at least mu_total, the variance the accounting assumes
(measured on sums the real client code masked and an honest server unmasked).
"""

from __future__ import annotations

import numpy as np
import pytest

from secure_fed.crypto.secagg_client import SiteRules
from secure_fed.crypto.secagg_protocol import CONSISTENCY, UNMASK, SecAggRefused, SecAggSettings
from secure_fed.crypto.transport import LocalTransport
from secure_fed.crypto.vectors import client_step, sum_vectors
from secure_fed.dp.distributed import DistributedPlan, decode_sum, encode_share, padded_size
from secure_fed.dp.events import rounded_sensitivities
from secure_fed.dp.keystream import NoiseStream
from tests.adversarial.harness_secagg import (
    Pki,
    Site,
    Transcript,
    consistency_request,
    honest_until_unmask,
    unmask_request,
    what_is_learned,
)

RING_BITS = 32
RING = SecAggSettings(clip=8.0, bits=24, ring_bits=RING_BITS)
DIM = 256


def _sites(n: int, honest_min: int | None, colluder: int | None = None) -> dict[int, Site]:
    """n sites whose inputs are ring residues (noise-share stand-ins), each with its own rule h."""
    pki = Pki([f"site-{i}" for i in range(1, n + 1)])
    rng = np.random.default_rng(n)
    rules = SiteRules(ring_bits=RING_BITS, honest_min=honest_min)
    return {
        i: Site(
            i,
            pki.identity(f"site-{i}"),
            rng.integers(0, 2**RING_BITS, DIM, dtype=np.uint64).astype(np.uint32),
            honest=i != colluder,
            rules=rules,
        )
        for i in range(1, n + 1)
    }


def _declare_dropped(transcript: Transcript, node: int, dropped: set[int]) -> dict:
    held = transcript.partners[node]
    return unmask_request(1, [w for w in held if w not in dropped], [w for w in held if w in dropped])


def test_a_server_declaring_honest_sites_dropped_below_h_gets_no_sum() -> None:
    """5 sites, h = 5, site 5 colludes: the server says site 4 dropped (it did not: its masked
    input is in hand) to unmask the sum of sites 1-3 and 5, four shares of which one is its
    colluder's. The SecAgg+ threshold (3 of 4 partners) allows that request; h does not."""
    sites = _sites(5, honest_min=5, colluder=5)
    transcript = honest_until_unmask(sites, settings=RING)
    assert set(transcript.masked) == set(sites)
    answers = {}
    for n in (1, 2, 3):
        shown = consistency_request(1, [1, 2, 3, 5], transcript.keys)
        with pytest.raises(SecAggRefused, match=r"fewer than h = 5 \(dp.honest_min\)") as refused:
            sites[n].send(CONSISTENCY, shown)
        # the refusal names the view the site was shown: four sites, node 4 missing
        assert f"nodes {sorted({1, 2, 3, 5})}" in str(refused.value)
        # and the unmask request the split relied on, without a signed set, is refused too
        with pytest.raises(SecAggRefused, match="confirmed survivor set first"):
            sites[n].send(UNMASK, _declare_dropped(transcript, n, {4}))
        answers[n] = None
    answers[4] = None  # declared dropped: never asked
    learned = what_is_learned(transcript, sites, answers)
    assert learned.sets == [], "the server computed a sum of the honest sites' inputs"


def test_without_h_the_same_lie_buys_a_sum_of_fewer_shares() -> None:
    """The control: sites without the rule (site-mode SecAgg+) answer the same request, and the
    server gets the sum of three honest shares (with its colluder's, four of the five)."""
    sites = _sites(5, honest_min=None, colluder=5)
    transcript = honest_until_unmask(sites, settings=RING)
    answers: dict[int, dict | None] = {
        n: sites[n].send(UNMASK, _declare_dropped(transcript, n, {4})) for n in (1, 2, 3)
    }
    answers[4] = None
    learned = what_is_learned(transcript, sites, answers)
    assert frozenset({1, 2, 3}) in learned.sets


def test_a_site_refuses_a_neighbourhood_smaller_than_h() -> None:
    """A masking graph that gives a site fewer than h - 1 neighbours could never show it h
    survivors: refused at the setup, before its keys are advertised."""
    sites = _sites(8, honest_min=8)  # 8 sites: log-scale degree 6, so 7 sites in a neighbourhood
    with pytest.raises(SecAggRefused, match="fewer than the 8"):
        honest_until_unmask(sites, settings=RING)
    assert all(site.state_for_checks.get("stage") is None for site in sites.values())


# -- (b), (c): the real mechanism's shares through the real client code -----------------------

SEED = b"public round seed of the attack tests"
CLIP = 1.0


def _plan(h: int, c: int, sites: int, dim: int = 8000) -> DistributedPlan:
    """A plan at a fixed granularity and noise (calibrating one to an ε takes seconds and changes
    nothing measured here): γ = C / 4096, mu_total = (3 Δ₂)², so σ ≈ 3 C per coordinate."""
    gamma = CLIP / 4096
    mu_total = (3 * CLIP / gamma) ** 2
    l2, l1 = rounded_sensitivities(CLIP, gamma, padded_size(dim))
    return DistributedPlan(
        clip=CLIP,
        dim=dim,
        padded_dim=padded_size(dim),
        gamma=gamma,
        bits=RING_BITS,
        honest_min=h,
        colluders=c,
        site_bound=64 * CLIP,
        mu_total=mu_total,
        share_mu=mu_total / (h - c),
        l2_sensitivity=l2,
        l1_sensitivity=l1,
        max_sites=sites,
        wrap_bound_sites=sites,
        wrap_tail=2.0**-40,
    )


def _clipped_sums(sites: int, dim: int) -> dict[int, np.ndarray]:
    """Each site's sum of a few patients' gradients clipped to C (what it encodes)."""
    rng = np.random.default_rng(31)
    out = {}
    for k in range(1, sites + 1):
        rows = rng.normal(0, 1, (5, dim))
        rows *= np.minimum(1.0, CLIP / np.linalg.norm(rows, axis=1, keepdims=True))
        out[k] = rows.sum(axis=0)
    return out


def _shares(plan: DistributedPlan, clipped: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    return {k: encode_share(x, plan, SEED, NoiseStream(bytes([100 + k]) * 32)) for k, x in clipped.items()}


def test_b_a_single_masked_upload_looks_uniform_and_carries_its_noise_share() -> None:
    plan = _plan(h=4, c=1, sites=4)
    clipped = _clipped_sums(4, plan.dim)
    shares = _shares(plan, clipped)
    pki = Pki([f"site-{i}" for i in range(1, 5)])
    rules = SiteRules(ring_bits=RING_BITS, honest_min=4)
    sites = {k: Site(k, pki.identity(f"site-{k}"), shares[k], rules=rules) for k in shares}
    ring = SecAggSettings(clip=8.0, bits=24, ring_bits=RING_BITS)
    transcript = honest_until_unmask(sites, settings=ring)
    upload = np.asarray(transcript.masked[1][:-1], dtype=np.uint64)
    # what the server holds of site 1: its top bytes spread evenly over 0..255 (chi-square, 255
    # degrees of freedom: mean 255, sd 22.6; 400 is over six sd), unrelated to the share
    counts = np.bincount((upload >> np.uint64(24)).astype(np.int64), minlength=256)
    expected = upload.size / 256
    assert float(((counts - expected) ** 2 / expected).sum()) < 400
    share = shares[1].astype(np.float64)
    assert abs(np.corrcoef(upload.astype(np.float64), share)[0, 1]) < 0.05
    # and the share under the masks is itself noised: decoded alone, it is the site's clipped sum
    # plus noise of variance share_mu (integer units), measured over every coordinate
    noise = (decode_sum(shares[1], plan, SEED) - clipped[1]) / plan.gamma
    assert abs(float(np.var(noise)) / plan.share_mu - 1) < 0.05


@pytest.mark.parametrize(("h", "c", "n"), [(4, 1, 4), (5, 2, 5), (4, 1, 5)])
def test_c_the_sum_minus_any_c_colluders_shares_keeps_mu_total(h: int, c: int, n: int) -> None:
    """The server unmasks the sum of all n sites with the real client code; for every set of c
    colluders it subtracts their shares (all they know of their own signal and noise); what stays
    is the honest sites' clipped sums plus noise of variance ≥ mu_total, measured."""
    import itertools

    from tests.crypto.test_secagg_rounds import with_identities

    plan = _plan(h=h, c=c, sites=n)
    clipped = _clipped_sums(n, plan.dim)
    shares = _shares(plan, clipped)
    rules = SiteRules(ring_bits=RING_BITS, honest_min=h)

    def step(phase, request, state, secret):  # noqa: ANN001, ANN202 (LocalTransport's signature)
        vector, identity = secret
        return client_step(phase, request, state, vector, identity=identity, rules=rules)

    ring = SecAggSettings(clip=8.0, bits=24, ring_bits=RING_BITS)
    transport = LocalTransport(with_identities(shares), step)
    total = sum_vectors(transport, list(shares), plan.padded_dim, ring, 1).total
    modulus = np.uint64((1 << RING_BITS) - 1)
    for colluders in itertools.combinations(sorted(shares), c):
        rest = np.asarray(total, dtype=np.uint64)
        for k in colluders:
            rest = (rest - shares[k]) & modulus
        honest = [k for k in shares if k not in colluders]
        noise = (decode_sum(rest, plan, SEED) - np.sum([clipped[k] for k in honest], axis=0)) / plan.gamma
        measured = float(np.var(noise))
        # n − c honest shares of mu_total / (h − c): at least mu_total whenever n ≥ h
        assert measured >= 0.95 * plan.mu_total, (colluders, measured / plan.mu_total)
        assert abs(measured / ((n - c) * plan.share_mu) - 1) < 0.05


def test_a_each_sites_refusal_below_h_goes_to_its_own_log(tmp_path) -> None:  # noqa: ANN001
    """The same lie through the site's dispatcher (`handle`, as the ClientApp and the in-process
    engine call it): the survivor set is refused (nothing confirmed) and the refusal is logged as the site's
    instruction record, its detail naming h and the view it was shown."""
    from types import SimpleNamespace

    from secure_fed.config import build_config
    from secure_fed.site.guard import SiteGuard
    from secure_fed.site.handler import handle

    sites = _sites(5, honest_min=5, colluder=5)
    transcript = honest_until_unmask(sites, settings=RING)
    cfg = build_config(
        {
            "out": str(tmp_path),
            "dp": {"enabled": True, "target_epsilon": 4.0, "noise": "distributed", "honest_min": 5},
            "fed": {"method": "fedavg"},
            "train": {"local_epochs": 1},
            "data": {"synth": {"sites": 5}},
        }
    )
    for n in (1, 2, 3):
        logged: list[tuple] = []
        runtime = SimpleNamespace(
            cfg=cfg,
            site=f"site-{n}",
            stash={"upload": sites[n].vector},
            guard=SiteGuard(path=tmp_path / f"guard-{n}.json", run_id="run-1"),
            privacy=SimpleNamespace(distributed=SimpleNamespace(bits=RING_BITS, honest_min=5, to_json=dict)),
            identity=lambda n=n: sites[n].identity,
            log_instruction=lambda *record, logged=logged: logged.append(record),
            upload_fingerprint=lambda: None,
        )
        request = consistency_request(1, [1, 2, 3, 5], transcript.keys)
        reply, _ = handle(runtime, CONSISTENCY, request, sites[n].state_for_checks)  # type: ignore[arg-type]
        assert reply["status"] == "refused" and "confirmations" not in reply
        [(phase, round_id, _digest, outcome, code, detail)] = logged
        assert (phase, round_id, outcome, code) == (CONSISTENCY, 1, "refused", "secagg")
        assert "fewer than h = 5" in detail and "nodes [1, 2, 3, 5]" in detail
