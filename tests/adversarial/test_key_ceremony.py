"""The key ceremony with the server relaying the published halves (docs/THREAT_MODEL.md "Key
ceremony"): the server swaps `site1.pub` for a key it made and adds a `site9.pub` of its own, then
plays site1 and site9 as the victim's SecAgg+ neighbours (the Sybil attack of test_secagg_sybil.py).
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from secure_fed.cli import app
from secure_fed.crypto import secagg_channel as channel
from secure_fed.crypto.key_ceremony import assemble, ceremony_digest, new_he_context, new_signing_key
from secure_fed.crypto.keys import (
    KeyMaterialError,
    _load_public_key,
    load_fingerprints,
    load_signing_key,
    public_context_path,
    public_key_fingerprint,
    secret_context_path,
    sha256_hex,
)
from secure_fed.crypto.secagg_identity import SecAggIdentity, load_identity
from secure_fed.crypto.secagg_protocol import MASKED, SETUP, SHARES, SecAggRefused, share_associated_data
from secure_fed.crypto.secagg_server import plan_setup
from secure_fed.crypto.secagg_shamir import SHARE_BYTES
from tests.adversarial.harness_secagg import (
    DIM,
    RUN_ID,
    SETTINGS,
    Site,
    keys_request,
    pair_sign,
    quantum,
    self_mask,
    strip,
    sybil_keys,
)

PARTIES = ["server", "site0", "site1", "site2"]
VICTIM = "site2"
SYBILS = {2: "site1", 3: "site9"}  # node id -> the site the server's node claims to be


@pytest.fixture(scope="module")
def ceremony(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every party's own folder after `keys new` (site0 also after `keys he-init`, and the other
    sites holding its CKKS secret), and `published/` as the parties sent it to the relay."""
    work = tmp_path_factory.mktemp("ceremony")
    published = work / "published"
    (published / "he").mkdir(parents=True)
    for party in PARTIES:
        new_signing_key(work / party, party)
        shutil.copyfile(work / party / "signing" / f"{party}.pub", published / f"{party}.pub")
    new_he_context(work / "site0")
    shutil.copyfile(public_context_path(work / "site0"), published / "he" / "public.tenseal")
    for site in ("site1", "site2"):
        (work / site / "he").mkdir()
        shutil.copyfile(secret_context_path(work / "site0"), secret_context_path(work / site))
    return work


def _relayed(ceremony: Path, tmp_path: Path) -> Path:
    """What the server hands on: site1's key swapped for one it made, and a site9 of its own."""
    relayed = tmp_path / "relayed"
    shutil.copytree(ceremony / "published", relayed)
    for party in SYBILS.values():
        new_signing_key(tmp_path / "server-made", party)
        shutil.copyfile(tmp_path / "server-made" / "signing" / f"{party}.pub", relayed / f"{party}.pub")
    return relayed


def _victim_kit(ceremony: Path, tmp_path: Path) -> Path:
    kit = tmp_path / "victim-kit"
    shutil.copytree(ceremony / VICTIM, kit)
    return kit


def _sybil_attack(victim: Site, server_made: Path) -> np.ndarray:
    """The server plays nodes 2 and 3 as site1 and site9, signing with the keys it made: it opens
    the victim's self-mask shares and knows both pairwise masks. Returns what it reads as the
    victim's update."""
    nodes = sorted(SYBILS)
    plan = plan_setup([1, *nodes], DIM, SETTINGS, 1, random.Random(0))
    keys, secrets = {1: victim.send(SETUP, plan.requests[1])}, {}
    for node, site in SYBILS.items():
        keys[node], secrets[node] = sybil_keys(1, node, site, load_signing_key(server_made, site))
    shared = victim.send(SHARES, keys_request(1, nodes, keys))
    channel_key = {s: channel.channel_key(secrets[s]["enc_sk"], keys[1]["enc_pk"]) for s in nodes}
    opened = [
        channel.open_sealed(channel_key[s], share_associated_data(1, 1, s), ct)
        for s, ct in zip(shared["share_to"], shared["share_ct"], strict=True)
    ]
    junk = [
        channel.seal(channel_key[s], share_associated_data(1, s, 1), bytes(SHARE_BYTES), random.randbytes)
        for s in nodes
    ]
    reply = victim.send(MASKED, {"round_id": 1, "share_from": nodes, "share_ct": junk})
    masks = [self_mask(opened, plan)]
    for s in nodes:
        key = channel.pairwise_mask_key(secrets[s]["mask_sk"], keys[1]["mask_pk"], 1)
        masks.append((key, pair_sign(1, s)))
    return strip(reply["masked"], masks, plan)


def _expectation(folder: Path, relayed: bool = False) -> dict:
    """The names and fingerprints the parties agreed on: read from each party's own folder (what
    its `keys new` printed), or, with `relayed`, from whatever the relay handed on."""
    if relayed:
        pubs = {p.stem: p for p in folder.glob("*.pub")}
        context = public_context_path(folder)
    else:
        pubs = {party: folder / party / "signing" / f"{party}.pub" for party in PARTIES}
        context = public_context_path(folder / "site0")
    return {
        "he_public": sha256_hex(context.read_bytes()),
        "signing": {party: public_key_fingerprint(_load_public_key(p)) for party, p in pubs.items()},
    }


def _victim(kit: Path) -> Site:
    return Site(1, load_identity(kit, VICTIM, RUN_ID), np.random.default_rng(0).normal(0, 1, DIM))


def test_control_an_expectation_taken_from_the_relay_gives_the_server_the_victims_update(
    ceremony: Path, tmp_path: Path
) -> None:
    """Trusting what the relay offers (trust on first use, which is what `keys assemble` did with
    no expectation: error 4.6e-7 against a quantum of 4.8e-7): the victim pins the server's keys
    for site1 and site9, then masks with the server's Sybils, which read its update."""
    relayed = _relayed(ceremony, tmp_path)
    kit = _victim_kit(ceremony, tmp_path)
    pinned = assemble(kit, relayed, _expectation(relayed, relayed=True))
    assert {"site1", "site9"} <= set(pinned["signing"])
    victim = _victim(kit)
    read = _sybil_attack(victim, tmp_path / "server-made")
    plan = plan_setup([1, *sorted(SYBILS)], DIM, SETTINGS, 1, random.Random(0))
    assert float(np.max(np.abs(read - victim.vector))) <= quantum(plan)


@pytest.mark.parametrize(
    ("relay", "refusal"),
    [
        ("swap site1", "site1.pub: fingerprint .* is not the expected .* refusing a substituted key"),
        ("add site9", "site9.pub: party 'site9' is not among the expected parties"),
        ("swap site1, add site9", "refusing"),
        ("drop site0", r"no .pub of expected \['site0'\]"),
    ],
)
def test_the_relay_cannot_swap_add_or_drop_a_key(
    ceremony: Path, tmp_path: Path, relay: str, refusal: str
) -> None:
    relayed = _relayed(ceremony, tmp_path)
    if "swap site1" not in relay:
        shutil.copyfile(ceremony / "published" / "site1.pub", relayed / "site1.pub")
    if "add site9" not in relay:
        (relayed / "site9.pub").unlink()
    if "drop site0" in relay:
        (relayed / "site0.pub").unlink()
    kit = _victim_kit(ceremony, tmp_path)
    before = sorted(p.relative_to(kit) for p in kit.rglob("*"))
    with pytest.raises(KeyMaterialError, match=refusal):
        assemble(kit, relayed, _expectation(ceremony))
    assert sorted(p.relative_to(kit) for p in kit.rglob("*")) == before  # nothing written


def test_the_honest_kit_refuses_the_servers_sybils(ceremony: Path, tmp_path: Path) -> None:
    """With the keys the parties agreed on, the server's site1 and site9 are no neighbours."""
    kit = _victim_kit(ceremony, tmp_path)
    pinned = assemble(kit, ceremony / "published", _expectation(ceremony))
    assert sorted(pinned["signing"]) == sorted(PARTIES)
    new_signing_key(tmp_path / "server-made", "site1")
    new_signing_key(tmp_path / "server-made", "site9")
    with pytest.raises(SecAggRefused, match="site1"):
        _sybil_attack(_victim(kit), tmp_path / "server-made")


def test_a_substituted_ckks_context_is_refused(ceremony: Path, tmp_path: Path) -> None:
    """The server's own kit holds no CKKS secret to catch a swapped public context with."""
    relayed = tmp_path / "relayed"
    shutil.copytree(ceremony / "published", relayed)
    new_he_context(tmp_path / "server-made")
    shutil.copyfile(public_context_path(tmp_path / "server-made"), public_context_path(relayed))
    kit = tmp_path / "server-kit"
    shutil.copytree(ceremony / "server", kit)
    with pytest.raises(KeyMaterialError, match="refusing a substituted CKKS context"):
        assemble(kit, relayed, _expectation(ceremony))
    assert not (kit / "fingerprints.json").exists()


def test_every_party_prints_one_digest_and_a_different_one_is_refused(ceremony: Path, tmp_path: Path) -> None:
    expect = tmp_path / "parties.json"
    expect.write_text(json.dumps(_expectation(ceremony)))
    digests = []
    for party in ("server", VICTIM):
        kit = tmp_path / party
        shutil.copytree(ceremony / party, kit)
        result = CliRunner().invoke(
            app,
            [
                "keys",
                "assemble",
                "--keys",
                str(kit),
                "--public",
                str(ceremony / "published"),
                "--expect",
                str(expect),
            ],
        )
        assert result.exit_code == 0, result.output
        digests += [
            line.split()[-1] for line in result.output.splitlines() if line.startswith("ceremony digest ")
        ]
    assert len(digests) == 2 and digests[0] == digests[1]
    assert digests[0] == ceremony_digest(load_fingerprints(tmp_path / VICTIM))
    # the relay adds site9 while a party holds the agreed digest: one line, nothing pinned
    relayed = _relayed(ceremony, tmp_path)
    shutil.copyfile(ceremony / "published" / "site1.pub", relayed / "site1.pub")
    kit = _victim_kit(ceremony, tmp_path)
    result = CliRunner().invoke(
        app,
        [
            "keys",
            "assemble",
            "--keys",
            str(kit),
            "--public",
            str(relayed),
            "--expect",
            str(expect),
            "--expect-digest",
            digests[0],
        ],
    )
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "site9" in lines[0], result.output
    assert not (kit / "fingerprints.json").exists()
    # an expectation that names site9 too (a tampered parties.json) still disagrees with the digest
    forged = _expectation(relayed, relayed=True)
    with pytest.raises(KeyMaterialError, match="is not the agreed"):
        assemble(kit, relayed, forged, expect_digest=digests[0])


# A deployment whose coordinator made its key as `coordinator`, not `server`: the server holds
# coordinator.pem, and site1 colludes with it (it hands the server its own signing key).
NAMED = ["coordinator", "site0", "site1", "site2"]


@pytest.fixture(scope="module")
def named_ceremony(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("named")
    published = work / "published"
    (published / "he").mkdir(parents=True)
    for party in NAMED:
        new_signing_key(work / party, party)
        shutil.copyfile(work / party / "signing" / f"{party}.pub", published / f"{party}.pub")
    new_he_context(work / "site0")
    shutil.copyfile(public_context_path(work / "site0"), published / "he" / "public.tenseal")
    return work


def _named_expectation(work: Path, **extra: object) -> dict:
    pubs = {party: work / party / "signing" / f"{party}.pub" for party in NAMED}
    return {
        "he_public": sha256_hex(public_context_path(work / "site0").read_bytes()),
        "signing": {party: public_key_fingerprint(_load_public_key(p)) for party, p in pubs.items()},
        **extra,
    }


def _coordinator_and_colluder_attack(victim: Site, work: Path) -> np.ndarray:
    """The server plays node 2 as `coordinator` (its own key) and node 3 as the colluding site1:
    every neighbour of the victim is its own, so it opens the victim's self mask and both pairwise
    masks. Returns what it reads as the victim's update."""
    signers = {2: ("coordinator", load_signing_key(work / "coordinator", "coordinator"))}
    signers[3] = ("site1", load_signing_key(work / "site1", "site1"))
    nodes = sorted(signers)
    plan = plan_setup([1, *nodes], DIM, SETTINGS, 1, random.Random(0))
    keys, secrets = {1: victim.send(SETUP, plan.requests[1])}, {}
    for node, (site, signer) in signers.items():
        keys[node], secrets[node] = sybil_keys(1, node, site, signer)
    shared = victim.send(SHARES, keys_request(1, nodes, keys))
    channel_key = {s: channel.channel_key(secrets[s]["enc_sk"], keys[1]["enc_pk"]) for s in nodes}
    opened = [
        channel.open_sealed(channel_key[s], share_associated_data(1, 1, s), ct)
        for s, ct in zip(shared["share_to"], shared["share_ct"], strict=True)
    ]
    junk = [
        channel.seal(channel_key[s], share_associated_data(1, s, 1), bytes(SHARE_BYTES), random.randbytes)
        for s in nodes
    ]
    reply = victim.send(MASKED, {"round_id": 1, "share_from": nodes, "share_ct": junk})
    masks = [self_mask(opened, plan)]
    for s in nodes:
        key = channel.pairwise_mask_key(secrets[s]["mask_sk"], keys[1]["mask_pk"], 1)
        masks.append((key, pair_sign(1, s)))
    return strip(reply["masked"], masks, plan)


def test_control_a_coordinator_counted_as_a_site_gives_the_server_the_victims_update(
    named_ceremony: Path,
) -> None:
    """What every kit did with a coordinator key not named `server`: it became a provisioned peer,
    one more "site" towards n, h and the threshold's count, and the server with one colluding site
    played the victim's whole neighbourhood."""
    peers = {party: _load_public_key(named_ceremony / "published" / f"{party}.pub") for party in NAMED}
    counted = SecAggIdentity(VICTIM, RUN_ID, load_signing_key(named_ceremony / VICTIM, VICTIM), peers)
    victim = Site(1, counted, np.random.default_rng(0).normal(0, 1, DIM))
    read = _coordinator_and_colluder_attack(victim, named_ceremony)
    plan = plan_setup([1, 2, 3], DIM, SETTINGS, 1, random.Random(0))
    assert float(np.max(np.abs(read - victim.vector))) <= quantum(plan)


def test_the_marked_coordinator_is_no_peer_and_the_attack_is_refused(
    named_ceremony: Path, tmp_path: Path
) -> None:
    kit = tmp_path / "kit"
    shutil.copytree(named_ceremony / VICTIM, kit)
    pinned = assemble(
        kit, named_ceremony / "published", _named_expectation(named_ceremony, coordinator="coordinator")
    )
    assert pinned["coordinator"] == "coordinator" and load_fingerprints(kit)["coordinator"] == "coordinator"
    identity = load_identity(kit, VICTIM, RUN_ID)
    assert sorted(identity.peer_public_keys) == ["site0", "site1", "site2"]  # three sites, not four
    victim = Site(1, identity, np.random.default_rng(0).normal(0, 1, DIM))
    with pytest.raises(SecAggRefused, match="coordinator"):
        _coordinator_and_colluder_attack(victim, named_ceremony)


@pytest.mark.parametrize(
    ("marker", "refusal"),
    [
        ({}, "names no coordinator"),  # no marker, and no party called server to read as one
        ({"coordinator": ["coordinator", "site0"]}, "names 2 parties, not exactly one"),
        ({"coordinator": "site9"}, "'site9' is not among its parties"),
    ],
)
def test_a_parties_json_without_exactly_one_coordinator_is_refused_in_one_line(
    named_ceremony: Path, tmp_path: Path, marker: dict, refusal: str
) -> None:
    expect = tmp_path / "parties.json"
    expect.write_text(json.dumps(_named_expectation(named_ceremony, **marker)))
    kit = tmp_path / "kit"
    shutil.copytree(named_ceremony / VICTIM, kit)
    command = ["keys", "assemble", "--keys", str(kit), "--public", str(named_ceremony / "published")]
    result = CliRunner().invoke(app, [*command, "--expect", str(expect)])
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "parties.json" in lines[0] and refusal in lines[0] and '"coordinator": "<' in lines[0]
    assert not (kit / "fingerprints.json").exists()


def test_a_second_coordinator_beside_server_is_refused(ceremony: Path, tmp_path: Path) -> None:
    """A party named `server` is the coordinator of every unmarked kit: marking another makes two."""
    kit = _victim_kit(ceremony, tmp_path)
    with pytest.raises(KeyMaterialError, match="two coordinators"):
        assemble(kit, ceremony / "published", {**_expectation(ceremony), "coordinator": "site0"})


def test_a_kit_made_before_the_marker_reads_server_as_the_coordinator_and_nothing_else(
    ceremony: Path, named_ceremony: Path, tmp_path: Path
) -> None:
    kit = _victim_kit(ceremony, tmp_path)
    assemble(kit, ceremony / "published", _expectation(ceremony))
    fingerprints = json.loads((kit / "fingerprints.json").read_text())
    del fingerprints["coordinator"]  # as an earlier version wrote it
    (kit / "fingerprints.json").write_text(json.dumps(fingerprints))
    assert sorted(load_identity(kit, VICTIM, RUN_ID).peer_public_keys) == ["site0", "site1", "site2"]
    # the same without a party called server: nothing to read the coordinator from, refused
    named = tmp_path / "named-kit"
    shutil.copytree(named_ceremony / VICTIM, named)
    assemble(
        named, named_ceremony / "published", _named_expectation(named_ceremony, coordinator="coordinator")
    )
    fingerprints = json.loads((named / "fingerprints.json").read_text())
    del fingerprints["coordinator"]
    (named / "fingerprints.json").write_text(json.dumps(fingerprints))
    with pytest.raises(SecAggRefused) as err:
        load_identity(named, VICTIM, RUN_ID)
    assert "fingerprints.json" in err.value.detail and "names no coordinator" in err.value.detail
    assert "\n" not in err.value.detail and str(named) not in str(err.value)
