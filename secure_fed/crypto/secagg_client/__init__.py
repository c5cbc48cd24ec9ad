"""SecAgg+ client: one pure step per phase, with all state in a flat dict of wire-safe values.

The server may send anything at all, so a client checks every instruction against what it already
agreed to and what it can verify, and refuses (`SecAggRefused`) rather than reveal more than the
protocol allows:

- its peers' public keys must be signed by distinct provisioned sites (`SecAggIdentity`), enough of
  them for the Shamir threshold: the server cannot stand in for a neighbour or count one twice;
- its update takes part in one secure sum only: once masked, the same update is refused for any
  later setup or masked phase, even after the server has restarted the protocol, so no two sums
  can differ by exactly this site's update; with an `upload_id` (the site's training round) so is
  any other update made for the same round: without DP a global moved by one ulp retrains the
  round into new bytes, and the two sums' difference was one site's update;
- with `members` (the sites of a server-chosen factor vector) its signed peers and itself must be
  exactly those sites: a vector padded with sites that never sum weighs one site above the rest;
- with the site's own `clip` and `bits`, the server's quantisation must be the site's;
- it masks only with a threshold of partners or more, answers one unmask request per round, and
  about each partner reveals either that partner's self-mask share (survived) or the pairwise mask
  key the two share (dropped), never both; its own pairwise keys only while a threshold of its
  partners survive. With the threshold at `collusion_safe_threshold`, the server, even with one
  colluding site, is then always at least one mask short of any single site's update
  (docs/THREAT_MODEL_secagg.md, tests/adversarial/test_secagg_collusion.py).

A dropped site's masks are cancelled with the pairwise keys its surviving partners reveal, not, as
in Bonawitz et al. (2017) and Bell et al. (2020), by rebuilding its mask key from Shamir shares: a
server that calls a live site "dropped" would get that key and with it every pairwise mask of the
site at once, while each partner's self-mask share opened the rest (the attack in
test_secagg_collusion.py, which needed no colluder). The price: a survivor that also goes silent
before revealing its key with a dropped partner ends the round with no aggregate.

By phase: `phase_setup`, `phase_shares`, `phase_masked`, `phase_unmask` (the consistency step and the
unmask), dispatched by `step`; `state` holds the site's rules and the state's keys, `once` the
once-only rule, `fields` the request's type checks.
"""

from secure_fed.crypto.secagg_client.once import upload_fingerprint
from secure_fed.crypto.secagg_client.phase_masked import masked_input
from secure_fed.crypto.secagg_client.state import (
    IDENTIFIED_PHASES,
    MASKED_UPLOADS,
    Entropy,
    SiteQuantisation,
    SiteRules,
    State,
)
from secure_fed.crypto.secagg_client.step import secagg_client_step

__all__ = [
    "IDENTIFIED_PHASES",
    "MASKED_UPLOADS",
    "Entropy",
    "SiteQuantisation",
    "SiteRules",
    "State",
    "masked_input",
    "secagg_client_step",
    "upload_fingerprint",
]
