"""Distributed DP against a server that gives sites different plans.

A deployed site takes the run's round count from the server's `hello`, and the round count sizes
its noise share (more rounds, more noise a round for the same ε). A server that told one site 20
rounds and the others 1 had every site mask together: the sum carried the others' small shares
where the victim's ledger assumed its own plan's mu_total (0.456 × it, measured by the review), and
`audit verify` said ok. Now each site signs its SecAgg+ keys (and its survivor set) for its own
plan's digest, so sites on different plans never mask together, and `audit verify` requires one
plan per round across the sites' logs, naming the round and the sites that differ.
"""

from __future__ import annotations

import pytest

from secure_fed.crypto.keys import load_public_keys
from secure_fed.verifier.verify import verify_logs
from tests.adversarial.harness import MaliciousServer, secure_round_until_masked
from tests.conftest import DISTRIBUTED_DP

VICTIM = 0
COLLUDER = 4


@pytest.mark.slow
def test_a_site_told_another_round_count_never_masks_with_the_others(make_config, one_torch_thread) -> None:  # noqa: ANN001
    cfg = make_config(**DISTRIBUTED_DP | {"dp__honest_min": None}, data__synth__sites=5, fed__rounds=1)
    victim_cfg = cfg.model_copy(update={"fed": cfg.fed.model_copy(update={"rounds": 20})})
    server = MaliciousServer(cfg, told={"site0": victim_cfg})
    plans = [site.runtime.privacy.distributed for site in server.sites]
    victim = plans[VICTIM]
    assert victim.mu_total > plans[1].mu_total  # the lie matters: 20 rounds need more noise a round

    secure = secure_round_until_masked(server, 1)
    if VICTIM in secure.masked():
        # the most noise a sum holding the victim's share can carry against the colluder: every
        # honest share that was masked in the same round
        honest = [n for n in secure.masked() if n != COLLUDER]
        carried = sum(plans[n].share_mu for n in honest)
        assert carried >= victim.mu_total, (
            f"the victim's share was masked with sites on another plan: the sum carries "
            f"{carried / victim.mu_total:.3f} × the mu_total its ledger assumes"
        )
    # the sites on the other plan refuse the victim's keys (signed for another plan's digest)
    assert VICTIM not in secure.masked()
    assert "not signed by site 'site0'" in " ".join(secure.refused.values()), secure.refused

    # and the sites' logs show it: verify names the round and the site whose plan differs
    result = verify_logs(server.log_paths(), load_public_keys(server.keys_dir))
    differ = [p.reason for p in result.problems if "distributed-DP plan differs" in p.reason]
    assert differ and all(r.startswith("round 1: site0's") for r in differ), result.problems
    assert "mu_total" in differ[0], differ[0]
