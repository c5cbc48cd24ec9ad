"""What a site decides itself about a secure sum (`SiteRules`), and what its client state holds
from phase to phase."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from secure_fed.crypto.secagg_protocol import (
    CONSISTENCY,
    MASKED,
    SETUP,
    SHARES,
    UNMASK,
)

State = dict[str, Any]


Entropy = Callable[[int], bytes]


@dataclass(frozen=True)
class SiteQuantisation:
    """The site's own SecAgg+ quantisation (its policy's `secagg.clip`, `secagg.bits`): the server's
    must match. clip None: the site sets none and takes the server's (tests of the protocol alone)."""

    clip: float | None = None
    bits: int | None = None  # None with a clip: the most bits a 32-bit ring holds (`word_bits`)


@dataclass(frozen=True)
class SiteRules:
    """What a site decides itself about a secure sum, whatever the server sends.

    quantisation: its clip and bits. members: the sites its input was scaled for (a factor
    vector's), which must be exactly its signed peers and itself; () = no such vector. upload_id:
    what its update was made for (its training round): one secure sum per id, whatever the bytes.
    ring_bits: set, its input is already integers mod 2^ring_bits (a distributed-DP noise share),
    masked as it is, and the round's ring must be exactly that. honest_min: h, the fewest sites
    (itself included) its signed view of the survivors must hold before it reveals anything that
    unmasks a sum: its share carries only part of the noise, which h sites' shares complete.
    colluders: c, the colluding neighbours its Shamir threshold must hold against (dp.colluders).
    """

    quantisation: SiteQuantisation = field(default_factory=SiteQuantisation)
    members: tuple[str, ...] = ()
    upload_id: str | None = None
    ring_bits: int | None = None
    honest_min: int | None = None
    colluders: int = 1


# Updates this site has sent masked, as "fingerprint@round": carried over every setup, which
# otherwise starts the state afresh, so restarting the protocol cannot buy a second sum.
MASKED_UPLOADS = "masked_uploads"


# what a client forgets once its masked vector is out: with them, a later leak of its state would
# let anyone strip its masks. The pairwise keys with its partners stay until the unmask request
# (a dropped partner's mask is cancelled with them) and go with it.
_SECRETS = ("enc_sk", "mask_sk", "seed", "peer_enc_pk", "peer_mask_pk", "peer_channel_key")


# this round's own public keys, kept from the setup to the share distribution (which checks no peer
# relays one of them) so they need not be derived again from the secrets
_OWN_PUBLIC = ("own_enc_pk", "own_mask_pk")


# the phases a client must have just completed before it accepts each request (an unmask follows
# the consistency step where the site requires one: `SiteRules.honest_min`)
_AFTER = {SHARES: (SETUP,), MASKED: (SHARES,), CONSISTENCY: (MASKED,), UNMASK: (MASKED, CONSISTENCY)}


# the phases that sign (setup, consistency) or check (share distribution, an unmask after the
# consistency step) identities
IDENTIFIED_PHASES = frozenset({SETUP, SHARES, CONSISTENCY, UNMASK})


# what one SecAgg+ round keeps in the state; a setup replaces exactly these and carries anything
# else (the record of masked updates, other protocols' records in the same state) to the new round
_ROUND_KEYS = frozenset(
    {
        "stage",
        "round_id",
        "node_id",
        "neighbours",
        "threshold",
        "modulus_bits",
        "clip",
        "bits",
        "enc_sk",
        "mask_sk",
        "own_enc_pk",
        "own_mask_pk",
        "seed",
        "upload_fingerprint",
        "context",
        "members",
        "ring_input",
        "upload_id",
        "peers",
        "peer_enc_pk",
        "peer_mask_pk",
        "peer_channel_key",
        "peer_confirm_key",
        "peer_sites",
        "partners",
        "held_seed",
        "pair_keys",
        "survivors",
        "survivor_sites",
        "confirmed_nodes",
    }
)
