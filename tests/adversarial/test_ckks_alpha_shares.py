"""α's noise as shares of its CKKS sum, sized for the participants a site verified, against a server
that would make the honest shares carry less than σ_α·C_α.

With dp.noise = "distributed" and he.enabled a site adds no noise at `hypergrad`; it keeps its
clipped sum and, inside the encrypt phase, after every listed participant's signed mask key
verified, adds a share of std σ_α·C_α/√(m − c) for the m participants the tag binds (the decryptor
decrypts only a sum over exactly those). So the shares of any m − c honest participants carry the
σ_α·C_α the ledger's `clipped_sum_event(σ_α)` charges. Five real `SiteRuntime`s (h = 4, c = 1):

a. a server that inflates m: a made-up or repeated participant is refused before anything is drawn;
   a list of 5 to one site and 4 to the others leaves no list the decryptor accepts; a sum over 4 of
   the 5 sites gets shares sized for 4 (sized for the 5 sites a site holds keys for, as a site that
   sized before the list was known would, its honest shares carried 3/4 of the charged variance:
   watched fail on that version);
b. a site that drops between the keys and the encrypt: the sum fails (the masks need it), and a
   second share for the round, asked of the others over the 4 left, is refused (with the encrypt
   once-a-round rule and the share-once rule both removed, the 4 drew a second share sized for 4: a
   colluding dropped site, which holds the secret context and its own mask key, could strip the first
   set's masks and average two independent noisings of one clipped sum; watched);
c. the share requested twice for one round: refused, with no second noise draw, even after a crash
   that lost the protocol's record of the encrypt (with the share-once rule removed, the second
   request drew a second share: watched).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from secure_fed.config import RunConfig
from secure_fed.crypto import ckks, scalars
from secure_fed.crypto.keys import init_keys
from secure_fed.crypto.scalars import DECRYPT_PHASE, ENCRYPT_PHASE, KEYS_PHASE, PLAIN_PHASE, HESettings
from secure_fed.site.guard import SiteGuard
from tests.adversarial.harness import MaliciousServer
from tests.adversarial.test_ckks_fresh_rounds import _admitted_round, _encrypt_request, _HESite
from tests.conftest import DISTRIBUTED_DP

SITES = 5


@pytest.fixture
def five(make_config: Callable[..., RunConfig], one_torch_thread: None, tmp_path: Path) -> MaliciousServer:
    keys = tmp_path / "keys"
    init_keys(keys, ["server", *(f"site{i}" for i in range(SITES))])
    cfg = make_config(
        **{**DISTRIBUTED_DP, "dp__honest_min": SITES - 1},
        data__synth__sites=SITES,
        fed__method="fedtar",
        he__enabled=True,
        he__keys_dir=str(keys),
        audit__keys_dir=str(keys),
    )
    return MaliciousServer(cfg)


class Draws:
    """Counts each site's α noise streams (one per share drawn)."""

    def __init__(self, sites: list[_HESite]) -> None:
        self.count = {n: 0 for n in range(len(sites))}
        for n, site in enumerate(sites):
            privacy = site.site.runtime.privacy
            assert privacy is not None
            original = privacy.noise_stream

            def counted(purpose: str, round_id: int, n: int = n, original: Any = original) -> Any:
                if purpose == "alpha":
                    self.count[n] += 1
                return original(purpose, round_id)

            privacy.noise_stream = counted  # type: ignore[method-assign]


def _keys(sites: list[_HESite], nodes: list[int], round_id: int = 1) -> dict[int, dict[str, Any]]:
    keyed = {n: sites[n].send(KEYS_PHASE, {"round_id": round_id, "node_id": n}) for n in nodes}
    assert all("mask_pk" in r for r in keyed.values()), keyed
    return keyed


def _decrypt(
    server: MaliciousServer,
    sites: list[_HESite],
    keyed: dict[int, dict[str, Any]],
    replies: dict[int, dict[str, Any]],
    round_id: int = 1,
) -> dict[str, Any]:
    settings = HESettings.from_keys_dir(server.cfg.he.keys_dir)  # type: ignore[arg-type]
    nodes = sorted(replies)
    cts = [replies[n]["ciphertext"] for n in nodes]
    decryptor = scalars.decryptor_for(nodes, round_id)
    return sites[decryptor].send(
        DECRYPT_PHASE,
        {
            "round_id": round_id,
            "node_id": decryptor,
            "participants": nodes,
            "participant_keys": [keyed[n]["mask_pk"] for n in nodes],
            "ciphertexts": cts,
            "tags": [replies[n]["tag"] for n in nodes],
            "aggregate": ckks.add_ciphertexts(settings.public_context, cts),
        },
    )


def _share_records(site: _HESite) -> list[dict[str, Any]]:
    return [r["payload"] for r in site.site.events("alpha_share")]


def _unit(site: _HESite) -> float:
    privacy = site.site.runtime.privacy
    assert privacy is not None
    return privacy.alpha_sigma * privacy.alpha_clip


def _honest_variance(sites: list[_HESite], summed: list[int], colluders: int = 1) -> float:
    """What the summed shares carry once the worst `colluders` of them are taken out, over the
    charged (σ_α·C_α)²: from each site's own signed record of the share it drew."""
    variances = sorted((_share_records(sites[n])[-1]["share_std"] / _unit(sites[n])) ** 2 for n in summed)
    return float(sum(variances[: len(variances) - colluders]))


@pytest.fixture
def sites(five: MaliciousServer) -> Iterator[list[_HESite]]:
    yield _admitted_round(five)


@pytest.mark.slow  # five private FedTAR sites under CKKS: make test-fast leaves it out
def test_the_share_is_sized_for_the_participants_verified(
    five: MaliciousServer, sites: list[_HESite]
) -> None:
    draws = Draws(sites)
    nodes = list(range(SITES))
    clipped = {n: np.array(s.site.runtime.stash["scalars"]) for n, s in enumerate(sites)}
    # un-noised until the share: never in the clear
    for n, site in enumerate(sites):
        reply = site.send(PLAIN_PHASE, {"round_id": 1})
        assert reply["status"] == "refused" and "scalars" not in reply
        assert draws.count[n] == 0 and not _share_records(site)
    keyed = _keys(sites, nodes)
    replies = {n: sites[n].send(ENCRYPT_PHASE, _encrypt_request(five, 1, n, keyed)) for n in nodes}
    assert all("ciphertext" in r for r in replies.values()), replies
    assert draws.count == {n: 1 for n in nodes}
    for site in sites:
        (record,) = _share_records(site)
        assert record["participants"] == SITES and record["colluders"] == 1
        assert record["members"] == [[k, f"site{k}"] for k in nodes]
        assert math.isclose(record["share_std"], _unit(site) / 2.0, rel_tol=1e-12)  # 1/√(5 − 1)
        assert math.isclose(record["share_over_sigma"], 0.5, rel_tol=1e-12)
    # any m − c = 4 honest shares carry exactly the charged variance
    assert math.isclose(_honest_variance(sites, nodes), 1.0, rel_tol=1e-12)
    reply = _decrypt(five, sites, keyed, replies)
    assert "sum" in reply, reply
    shares = [np.load(s.site.runtime.folder / "alpha-r1.share.npy") for s in sites]
    np.testing.assert_allclose(reply["sum"], np.sum(shares, axis=0), atol=1e-6, rtol=0)
    # the released sum is the clipped sums plus the noise of the shares, and carries noise
    noise = reply["sum"] - np.sum(list(clipped.values()), axis=0)
    assert np.all(np.abs(noise) > 0)
    # the ledger charged σ_α on the whole sum, and says what carried it
    for site in sites:
        (alpha,) = [
            r["payload"] for r in site.site.events("privacy") if r["payload"]["mechanism"] == "alpha_scalars"
        ]
        assert alpha["noise"] == "shares" and alpha["colluders"] == 1
        assert alpha["event"]["noise_multiplier"] == site.site.runtime.privacy.alpha_sigma  # type: ignore[union-attr]


@pytest.mark.slow
def test_a_a_server_that_inflates_m_shrinks_no_honest_share(
    five: MaliciousServer, sites: list[_HESite]
) -> None:
    draws = Draws(sites)
    nodes = list(range(SITES))
    keyed = _keys(sites, nodes)

    # a made-up sixth participant, and a real one listed twice: refused before any draw
    fake = {**keyed, 5: {"site": "site9", "mask_pk": b"k" * 32, "signature": b"s" * 64}}
    twice = {**keyed, 5: keyed[1]}
    for forged in (fake, twice):
        for n in nodes:
            reply = sites[n].send(ENCRYPT_PHASE, _encrypt_request(five, 1, n, forged))
            assert reply["status"] == "refused" and "ciphertext" not in reply, reply
    assert draws.count == {n: 0 for n in nodes}
    assert not any(_share_records(s) for s in sites)

    # five to site0, four (site4 left out) to the others: site0's share is sized for the five it was
    # shown, and no list makes the decryptor accept the sum
    four = {n: keyed[n] for n in range(4)}
    replies = {0: sites[0].send(ENCRYPT_PHASE, _encrypt_request(five, 1, 0, keyed))}
    replies |= {n: sites[n].send(ENCRYPT_PHASE, _encrypt_request(five, 1, n, four)) for n in (1, 2, 3)}
    assert all("ciphertext" in r for r in replies.values())
    assert _share_records(sites[0])[0]["participants"] == 5
    assert all(_share_records(sites[n])[0]["participants"] == 4 for n in (1, 2, 3))
    reply = _decrypt(five, sites, four, replies)
    assert reply["status"] == "refused" and "sum" not in reply and "do not verify" in reply["error"], reply


@pytest.mark.slow
def test_a_a_sum_over_fewer_sites_than_the_run_has_gets_shares_sized_for_them(
    five: MaliciousServer, sites: list[_HESite]
) -> None:
    """The server leaves site4 out of the round (its right: a site may be down): the four shares are
    sized for four, so the three honest of them carry the charged noise. Sized for the run's five,
    they carried 3/4 of it."""
    nodes = [0, 1, 2, 3]
    keyed = _keys(sites, nodes)
    replies = {n: sites[n].send(ENCRYPT_PHASE, _encrypt_request(five, 1, n, keyed)) for n in nodes}
    assert all("ciphertext" in r for r in replies.values()), replies
    assert _honest_variance(sites, nodes) >= 1.0 - 1e-12
    assert all(_share_records(sites[n])[0]["participants"] == 4 for n in nodes)
    assert "sum" in _decrypt(five, sites, keyed, replies)


@pytest.mark.slow
def test_b_a_site_that_drops_after_its_key_leaves_no_sum_and_no_second_share(
    five: MaliciousServer, sites: list[_HESite]
) -> None:
    draws = Draws(sites)
    nodes = list(range(SITES))
    keyed = _keys(sites, nodes)
    left = [0, 1, 2, 3]  # site4 drops before encrypting
    replies = {n: sites[n].send(ENCRYPT_PHASE, _encrypt_request(five, 1, n, keyed)) for n in left}
    assert all("ciphertext" in r for r in replies.values())
    assert all(_share_records(sites[n])[0]["participants"] == 5 for n in left)
    # the four ciphertexts alone: their tags bind the five, so no decryptor accepts them
    reply = _decrypt(five, sites, {n: keyed[n] for n in left}, replies)
    assert reply["status"] == "refused" and "sum" not in reply

    # the server asks the four again, over the four: a second share of the round, refused
    four = {n: keyed[n] for n in left}
    for n in left:
        again = sites[n].send(ENCRYPT_PHASE, _encrypt_request(five, 1, n, four))
        assert again["status"] == "refused" and "ciphertext" not in again, again
        fresh = sites[n].send(KEYS_PHASE, {"round_id": 1, "node_id": n})
        assert fresh["status"] == "refused" and "mask_pk" not in fresh, fresh
    assert draws.count == {0: 1, 1: 1, 2: 1, 3: 1, 4: 0}
    assert all(len(_share_records(sites[n])) == 1 for n in left)
    assert not _share_records(sites[4])


@pytest.mark.slow
def test_c_a_share_asked_twice_is_refused_without_a_second_draw(
    five: MaliciousServer, sites: list[_HESite], monkeypatch: pytest.MonkeyPatch
) -> None:
    draws = Draws(sites)
    nodes = list(range(SITES))
    keyed = _keys(sites, nodes)
    victim = sites[0]
    first = victim.send(ENCRYPT_PHASE, _encrypt_request(five, 1, 0, keyed))
    assert "ciphertext" in first
    again = victim.send(ENCRYPT_PHASE, _encrypt_request(five, 1, 0, keyed))
    assert again["status"] == "refused" and "already encrypted" in again["error"]
    assert draws.count[0] == 1

    # a crash after the draw and before the site kept its protocol marks: the restarted node has no
    # record of the encrypt nor of its mask key, so the server may start the round over with it
    target = sites[1]
    original = SiteGuard.keep_marks

    def crash(self: SiteGuard, state: dict[str, Any], keys: tuple[str, ...]) -> None:
        if scalars.ROUND_MARKS[0] in state:
            raise RuntimeError("the node died")
        original(self, state, keys)

    monkeypatch.setattr(SiteGuard, "keep_marks", crash)
    lost = target.send(ENCRYPT_PHASE, _encrypt_request(five, 1, 1, keyed))
    assert lost["status"] == "error" and "ciphertext" not in lost  # the reply never left the node
    monkeypatch.setattr(SiteGuard, "keep_marks", original)
    target.site.state = {}
    assert draws.count[1] == 1
    rekeyed = target.send(KEYS_PHASE, {"round_id": 1, "node_id": 1})
    assert "mask_pk" in rekeyed  # the protocol itself does not remember this round
    retry = target.send(ENCRYPT_PHASE, _encrypt_request(five, 1, 1, {**keyed, 1: rekeyed}))
    assert retry["status"] == "refused" and "ciphertext" not in retry, retry
    assert "drew its α noise share already" in retry["error"]
    assert draws.count[1] == 1 and len(_share_records(target)) == 1


def _share_problems(server: MaliciousServer) -> list[str]:
    from secure_fed.crypto.keys import load_public_keys
    from secure_fed.verifier.verify import verify_logs

    found = verify_logs(server.log_paths(), load_public_keys(server.keys_dir)).problems
    return [p.reason for p in found if "α share" in p.reason or "hash" in p.reason or "signature" in p.reason]


@pytest.mark.slow
def test_audit_verify_re_derives_each_share_from_the_signed_records(
    five: MaliciousServer, sites: list[_HESite]
) -> None:
    """An honest round verifies; a share record edited after signing fails its signature; one its
    site re-signed (the key holder's forgery) fails the re-derivation: m against the participants
    listed, and std against σ_α·C_α/√(m − c) with the σ_α and C_α the site charged."""
    from secure_fed.audits.keys import load_private_key
    from tests.verifier.tamper import first_index, read_records, reseal_from, write_records

    nodes = list(range(SITES))
    keyed = _keys(sites, nodes)
    replies = {n: sites[n].send(ENCRYPT_PHASE, _encrypt_request(five, 1, n, keyed)) for n in nodes}
    assert "sum" in _decrypt(five, sites, keyed, replies)
    assert _share_problems(five) == []

    path = five.log_paths()[0]
    honest = read_records(path)
    index = first_index(honest, "alpha_share")
    key = load_private_key(five.keys_dir, "site0")

    def forged(change: dict[str, Any], resign: bool) -> list[str]:
        records = json.loads(json.dumps(honest))
        records[index]["payload"].update(change)
        write_records(path, reseal_from(records, index, key) if resign else records)
        return _share_problems(five)

    # edited after signing: the chain and the signature no longer hold
    assert forged({"share_std": honest[index]["payload"]["share_std"] / 2}, resign=False)
    # re-signed by the site's own key: a share that claims more participants than it lists
    reasons = forged({"participants": 6, "share_std": _unit(sites[0]) / math.sqrt(5)}, resign=True)
    assert any(
        "round 1: site0 logged an α share sized for m = 6 participants but lists 5" in r for r in reasons
    )
    # a smaller share than the rule gives for the five it lists
    reasons = forged({"share_std": _unit(sites[0]) / 3, "share_over_sigma": 1 / 3}, resign=True)
    assert any("round 1: site0 drew an α share of std" in r and "σ_α·C_α/√(m − c)" in r for r in reasons)
    # a list of participants unlike the other sites' (the server told it five, them four)
    members = honest[index]["payload"]["members"]
    reasons = forged({"members": [*members[:4], [7, "site4"]]}, resign=True)
    assert any("sized their α shares for different participant lists" in r for r in reasons), reasons
    write_records(path, honest)
    assert _share_problems(five) == []
