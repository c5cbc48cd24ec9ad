"""Attack (issue 29, item 2), DRFA factor padding: a factor vector over the real sites plus made-up
ones passes the floor and the mean, yet weighs one real site far above the others.

Three real sites and 97 invented names, the victim at 50.5 and everything else at the floor 0.5:
the entries average 1 and none is below the floor, so every site used to accept the vector. Only
the three real sites mask, so the secure sum was 50.5·v + 0.5·(a + b): the victim's update to a
few per cent (the review measured correlation 0.99986). The same works with real but absent
sites: provisioned sites that never join the round pad the vector just as well.

Now a site accepts factors only over sites it holds a provisioned key for, and masks only when the
signed SecAgg+ peers of the round, with itself, are exactly the sites of the factor vector.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from secure_fed.crypto.secagg_protocol import SecAggAbort, SecAggSettings
from secure_fed.crypto.vectors import sum_vectors
from secure_fed.server.transports import InProcessTransport
from tests.adversarial.harness import MaliciousServer, Site


def _names(sites: list[Site]) -> list[str]:
    return [site.runtime.site for site in sites]


def _secure_sum(server: MaliciousServer, sites: list[Site], dim: int) -> np.ndarray:
    """The SecAgg+ sum over `sites` (the server's own driver, through the real handlers)."""
    transport = InProcessTransport({n: site.send for n, site in enumerate(sites)})
    settings = SecAggSettings.from_config(server.cfg.secagg)
    return sum_vectors(
        transport, list(range(len(sites))), dim, settings, round_id=1, rng=random.Random(0)
    ).total


def _victim_share(total: np.ndarray, victim: np.ndarray) -> float:
    return float(np.corrcoef(total, victim)[0, 1])


@pytest.fixture
def drfa(make_config, one_torch_thread) -> MaliciousServer:
    return MaliciousServer(make_config(fed__method="drfa", secagg__enabled=True, fed__rounds=2))


def test_made_up_sites_cannot_pad_the_factor_vector(drfa: MaliciousServer) -> None:
    real = _names(drfa.sites)
    made_up = [f"ghost-{i:02d}" for i in range(100 - len(real))]
    factors = [50.5] + [0.5] * (len(real) - 1 + len(made_up))
    assert abs(np.mean(factors) - 1.0) < 1e-12 and min(factors) >= drfa.cfg.fed.factor_floor
    replies = [
        site.send("train", drfa.honest_train(1, factor_sites=real + made_up, factors=factors))
        for site in drfa.sites
    ]
    if all(r["status"] == "ok" for r in replies):  # the attack as it ran before: show what it got
        total = _secure_sum(drfa, drfa.sites, int(replies[0]["dim"]))
        victim = np.asarray(drfa.victim.runtime.stash["upload"]) / 50.5
        pytest.fail(
            f"padded vector accepted; sum vs victim's update: corr {_victim_share(total, victim):.5f}"
        )
    assert all(r["status"] == "refused" and r["code"] == "factors" for r in replies), replies
    assert all("ghost-00" in r["error"] and "provisioned" in r["error"] for r in replies), replies
    assert all("upload" not in site.runtime.stash for site in drfa.sites)  # nothing was trained


@pytest.fixture
def drfa4(make_config, one_torch_thread) -> MaliciousServer:
    return MaliciousServer(
        make_config(fed__method="drfa", secagg__enabled=True, fed__rounds=2, data__synth__sites=4)
    )


def test_provisioned_sites_absent_from_the_sum_cannot_pad_it(drfa4: MaliciousServer) -> None:
    """Four provisioned sites, three of which take part: the absent one's floor entry is weight the
    server moves onto the victim (2.5 against 0.5, where three sites alone allow at most 2)."""
    names = _names(drfa4.sites)
    present = drfa4.sites[:3]
    factors = [2.5, 0.5, 0.5, 0.5]
    replies = [
        site.send("train", drfa4.honest_train(1, factor_sites=names, factors=factors)) for site in present
    ]
    assert all(r["status"] == "ok" for r in replies), replies  # a vector over real sites is fine here
    dim = int(replies[0]["dim"])
    try:
        total = _secure_sum(drfa4, present, dim)
    except SecAggAbort:
        pass  # every site refused to mask: its peers are not the factor vector's sites
    else:
        victim = np.asarray(drfa4.victim.runtime.stash["upload"])
        pytest.fail(
            f"sum over 3 of 4 factor sites released; corr with the victim: {_victim_share(total, victim):.4f}"
        )
    for site in present:
        (record,) = [r for r in site.events("instruction") if r["payload"]["phase"] == "secagg_shares"]
        assert record["payload"]["outcome"] == "refused" and record["payload"]["code"] == "secagg"
        (said,) = [d for d in site.debug() if d["phase"] == "secagg_shares"]  # unsigned, on the site
        assert "factor" in said["detail"] and names[3] in said["detail"]


def test_the_sites_of_the_factor_vector_sum_as_usual(drfa4: MaliciousServer) -> None:
    """The control: every site of the vector trains and takes part; the sum forms and each site
    scaled its contribution by its own entry."""
    names = _names(drfa4.sites)
    factors = [1.75, 0.75, 0.75, 0.75]
    replies = [
        site.send("train", drfa4.honest_train(1, factor_sites=names, factors=factors)) for site in drfa4.sites
    ]
    assert all(r["status"] == "ok" for r in replies), replies
    dim = int(replies[0]["dim"])
    expected = sum(np.asarray(site.runtime.stash["upload"]) for site in drfa4.sites)
    total = _secure_sum(drfa4, drfa4.sites, dim)
    np.testing.assert_allclose(total, expected, atol=1e-5)
