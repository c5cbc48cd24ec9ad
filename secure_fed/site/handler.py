"""One entry point for every phase a site answers: the Flower ClientApp and the in-process engine
both call `handle`, so the protocol is the same whichever runtime carries it.

Every server message is untrusted input. `handle` checks it against the site's policy and guard,
acts or refuses, and writes one `instruction` record to the site's own audit log either way (phase,
round, digest of the parameters, outcome, code). What goes back on a refusal or an error is a code
and our own one-line reason, never an exception's text: that can carry local paths or study ids,
which stay in the site's log.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from secure_fed.crypto import scalars as scalar_sum
from secure_fed.crypto import vectors as vector_sum
from secure_fed.crypto.secagg_protocol import (
    CONSISTENCY,
    NOISE_LAYER_INDEX,
    NOISE_LAYER_SEEDS,
    NOISE_SURVIVORS,
    PLAIN_SUM,
    SECAGG_PHASES,
    SETUP,
    UNMASK,
    SecAggRefused,
    embed_setup,
    embedded_setup,
)
from secure_fed.site.alpha_shares import draw_share
from secure_fed.site.guard import Refusal, SiteFault, SiteGuard, request_digest
from secure_fed.site.policy import PolicyViolation, SitePolicy
from secure_fed.site.runtime import SiteRuntime

log = logging.getLogger(__name__)

Payload = dict[str, Any]
# a reply field `handle` moves into the site's log and never sends: details that may name local files
_LOCAL_DETAIL = "_local_detail"
# a request carried inside another (a plain sum in a training message): its own log record, as the
# plain-sum query would have had, so the log reads the same whether a round takes one phase or two
_CARRIED_INSTRUCTION = "_carried_instruction"

# the rounds whose removable noise layers this site has revealed (or refused to): once a round, ever
NOISE_REVEALS = "noise_reveals"
# protocol records that must survive a node restart (kept in the guard's file as well)
PROTOCOL_MARKS = (vector_sum.MASKED_UPLOADS, *scalar_sum.ROUND_MARKS, NOISE_REVEALS)
VECTOR_PHASES = frozenset({PLAIN_SUM, *SECAGG_PHASES})
SCALAR_PHASES = frozenset(
    {scalar_sum.PLAIN_PHASE, scalar_sum.KEYS_PHASE, scalar_sum.ENCRYPT_PHASE, scalar_sum.DECRYPT_PHASE}
)


def handle(
    runtime: SiteRuntime, phase: str, request: Payload, state: Payload, secret_context: object | None = None
) -> tuple[Payload, Payload]:
    round_id = request.get("round", request.get("round_id"))
    digest = request_digest(phase, request)
    outcome, code, detail = "acted", None, None
    carried = None
    # From disk, not memory: under Flower another process may have answered the previous message.
    runtime.guard = SiteGuard.load(runtime.guard.path, runtime.guard.run_id)
    try:
        SitePolicy.from_config(runtime.cfg).check(phase, request)
        runtime.guard.check_open(phase)
        runtime.guard.fix_run(runtime.cfg.fed.method, runtime.cfg.fed.rounds)
        state = runtime.guard.restore_marks(state, PROTOCOL_MARKS)
        reply, state = _dispatch(runtime, phase, request, state, secret_context, digest)
        detail = reply.pop(_LOCAL_DETAIL, None)
        carried = reply.pop(_CARRIED_INSTRUCTION, None)
        runtime.guard.keep_marks(state, PROTOCOL_MARKS)
        if reply.get("status") == "refused" or "error" in reply:  # a protocol step's own refusal
            outcome, code = "refused", str(reply.get("code", "protocol"))
            detail = str(reply.get("error", ""))
            reply = {**reply, "status": "refused", "code": code}
    except (PolicyViolation, Refusal, SecAggRefused) as err:  # our own reasons: safe to send
        outcome, detail = "refused", getattr(err, "detail", str(err))  # may name local files
        code = _refusal_code(err)
        reply = {"status": "refused", "code": code, "error": str(err)}
    except SiteFault as err:  # the site's own failing: the request was fine, so not "malformed"
        outcome, code, detail = "error", "site_fault", str(err)
        reply = {
            "status": "error",
            "code": code,
            "error": f"the site could not complete {phase!r}: a fault in its own setup (named in its log)",
        }
    except (KeyError, TypeError, ValueError) as err:
        outcome, code, detail = "error", "bad_request", f"{type(err).__name__}: {err}"
        reply = {"status": "error", "code": code, "error": f"malformed {phase!r} request"}
    except Exception as err:  # noqa: BLE001 (anything else: the server gets a code, the log the rest)
        log.exception("%s failed", phase)
        outcome, code, detail = "error", "internal", f"{type(err).__name__}: {err}"
        reply = {"status": "error", "code": code, "error": f"the site could not complete {phase!r}"}
    runtime.log_instruction(phase, round_id, digest, outcome, code, detail)
    if carried is not None:
        runtime.log_instruction(*carried)
    return reply, state


def _dispatch(
    runtime: SiteRuntime,
    phase: str,
    request: Payload,
    state: Payload,
    secret_context: object | None,
    digest: str,
) -> tuple[Payload, Payload]:
    round_id = int(request.get("round", 0))
    if phase == "hello":
        _check_announcement(runtime, request)
        return {"site": runtime.site, "dp": runtime.privacy is not None}, state
    if phase == "train":
        reply = runtime.train(round_id, str(request["method"]), request["global"], request)
        plain = vector_sum.embedded_plain_sum(request)
        if plain is not None and reply.get("status") == "ok":
            return _carry_plain_sum(runtime, plain, reply, state)
        setup = embedded_setup(request)
        if setup is None or reply.get("status") != "ok":
            return reply, state
        # SecAgg+ key advertisement rides on the training message: the update it will mask exists now
        try:
            _check_secagg_round(runtime, setup)
            keys, state = vector_sum.client_step(
                SETUP,
                setup,
                state,  # not {}: it records the updates already masked, so none is summed twice
                runtime.stash["upload"],
                identity=runtime.identity(),
                context=_secagg_context(runtime),
                fingerprint=runtime.upload_fingerprint(),
                rules=_secagg_rules(runtime),
            )
        except SecAggRefused as exc:  # the training result stands; the secure sum counts us as dropped
            return {**reply, "secagg_refused": str(exc), _LOCAL_DETAIL: exc.detail}, state
        return {**reply, **embed_setup(keys)}, state
    if phase == "hypergrad":
        return runtime.hypergrad(round_id, request["final"], request["directions"], digest), state
    if phase == "finish":
        return runtime.finish(_stopped_early(request), bool(request.get("aborted"))), state
    if phase == "evaluate":
        return runtime.evaluate(
            request["global"], str(request.get("split", "test")), _stopped_early(request)
        ), state
    if phase in VECTOR_PHASES:
        upload = runtime.stash.get("upload")
        if upload is None:
            raise Refusal("no_update", "no update to aggregate this round")
        if phase == SETUP:  # the later phases are held to the setup's round by the protocol state
            _check_secagg_round(runtime, request)
        layered = phase == UNMASK and _distributed_plan(runtime) is not None
        if layered:
            _check_not_revealed(state, request)
        reply, state = vector_sum.client_step(
            phase,
            request,
            state,
            upload,
            identity=runtime.identity,
            # read at the setup only (later phases check against the state's copy)
            context=_secagg_context(runtime) if phase == SETUP else b"",
            fingerprint=runtime.upload_fingerprint(),
            rules=_secagg_rules(runtime),
        )
        if phase == CONSISTENCY:
            _log_survivors(runtime, state)
        if layered:
            return _reveal_layers(runtime, request, reply, state)
        return reply, state
    if phase in SCALAR_PHASES:
        scalars = runtime.stash.get("scalars")
        if scalars is None:
            raise Refusal("no_scalars", "no α scalars this round")
        if request.get("round_id") != runtime.stash.get("scalars_round"):
            # the α round is the training round the site admitted, never an id the server makes up
            raise Refusal(
                "alpha_round", f"this site's α scalars are for round {runtime.stash.get('scalars_round')}"
            )
        identity = None
        if phase == scalar_sum.KEYS_PHASE or phase == scalar_sum.ENCRYPT_PHASE:
            identity = runtime.identity()
        if phase != scalar_sum.PLAIN_PHASE and runtime.node_id is None:
            # the decryptor's id binds every tag: taken from the request, any site could be made to
            # decrypt as the round's decryptor
            raise Refusal("bad_request", "this site's runtime knows no node id; CKKS rounds need one")
        minimum = max(3, runtime.cfg.fed.min_sites)
        values = _shared_alpha(runtime, request, scalars)
        return scalar_sum.client_step(
            phase, request, state, values, secret_context, identity, minimum, node_id=runtime.node_id
        )
    raise Refusal("unknown_phase", f"unknown phase {phase!r}")


def _shared_alpha(runtime: SiteRuntime, request: Payload, scalars: Any) -> Any:
    """Under distributed DP with CKKS the site's α values are its clipped sum plus a share of the
    noise, sized for the participants the encrypt phase verifies: the protocol calls the hook only
    after every listed participant's signed key checked, with their number, so the share is sized
    for the list its tag binds, never for a count the server asserts. Elsewhere: the stashed release."""
    privacy = runtime.privacy
    if privacy is None or not privacy.alpha_shared:
        return scalars
    round_id = request.get("round_id")

    def share(participants: int) -> np.ndarray:
        nodes, sites = request["peer_nodes"], request["peer_sites"]
        if len(nodes) != participants:  # the protocol passes the list it verified: never otherwise
            raise scalar_sum.ValuesRefused("the participants counted are not the ones listed")
        return draw_share(runtime, round_id, list(zip(nodes, sites, strict=True)))

    return scalar_sum.SizedValues(int(np.asarray(scalars).size), share)


def _carry_plain_sum(
    runtime: SiteRuntime, request: Payload, reply: Payload, state: Payload
) -> tuple[Payload, Payload]:
    """A plain round's vector in the training reply, under the same rules as the plain-sum query:
    the site's policy (one that requires SecAgg+ sends no vector in the clear) and the request's
    length. A refusal leaves the training result standing; the sum counts the site as dropped."""
    round_id = request.get("round_id")
    digest = request_digest(PLAIN_SUM, request)
    try:
        SitePolicy.from_config(runtime.cfg).check(PLAIN_SUM, request)
        upload = runtime.stash.get("upload")
        if upload is None:
            raise Refusal("no_update", "no update to aggregate this round")
        vector, state = vector_sum.client_step(PLAIN_SUM, request, state, upload)
    except (PolicyViolation, Refusal, SecAggRefused) as exc:
        logged = (PLAIN_SUM, round_id, digest, "refused", _refusal_code(exc), str(exc))
        return {**reply, vector_sum.PLAIN_SUM_REFUSED: str(exc), _CARRIED_INSTRUCTION: logged}, state
    logged = (PLAIN_SUM, round_id, digest, "acted", None, None)
    return {**reply, **vector_sum.embed_plain_sum(vector), _CARRIED_INSTRUCTION: logged}, state


def _check_announcement(runtime: SiteRuntime, request: Payload) -> None:
    """A `hello` announcing another method or round count than the run was fixed at is refused (a
    value of the wrong type announces nothing, as the ClientApp reads it)."""
    method, rounds = request.get("method"), request.get("rounds")
    runtime.guard.check_announced(
        method if isinstance(method, str) else None,
        rounds if isinstance(rounds, int) and not isinstance(rounds, bool) else None,
        "a hello",
    )


def _check_secagg_round(runtime: SiteRuntime, setup: Payload) -> None:
    """An update is masked only in the secure sum of the training round it was made for: a saved
    release re-sent in another round's sum would add up with shares made for that round (another
    plan's, another sample's), which is not the sum its ledger charged."""
    upload_round = runtime.stash.get("upload_round")
    asked = setup.get("round_id")
    if upload_round is None:
        raise SecAggRefused("this site's update names no training round; it is masked in no secure sum")
    if isinstance(asked, bool) or asked != upload_round:
        raise SecAggRefused(
            f"this site's update is for training round {upload_round}: it is masked in that round's "
            f"secure sum only, not in round {asked!r}'s (send the setup with the training round's id)"
        )


def _secagg_context(runtime: SiteRuntime) -> bytes:
    """What the site's SecAgg+ keys (and survivor confirmations) are made for: the server-chosen
    factors it scaled its update by and, under distributed DP, the digest of the plan its share was
    noised under (kept with a saved release, so a re-sent one is signed for its own plan, not the
    one the site holds now): sites on different plans never mask or unmask together."""
    context = bytes(runtime.stash.get("secagg_context", b""))
    if getattr(getattr(runtime, "privacy", None), "distributed", None) is None:
        return context
    noised = runtime.stash.get("upload_plan")
    if not isinstance(noised, str) or not noised:
        raise SecAggRefused(
            "this site's update keeps no record of the distributed-DP plan it was noised for; it is "
            "not masked (the site sits this round out)"
        )
    return context + b"|distributed-dp-plan|" + noised.encode()


def _log_survivors(runtime: SiteRuntime, state: Payload) -> None:
    """The survivor set this site confirmed (the only one it will unmask for), in its own signed log:
    `audit verify` checks that every site of a round confirmed the same set, of at least h sites.
    The set is logged as its sites and as its (node, site) pairs: a server that listed one site under
    another node id for some sites would leave the names alike and the pairs apart."""
    trail = getattr(runtime, "trail", None)
    if trail is None or trail.log.closed:
        return
    plan = getattr(getattr(runtime, "privacy", None), "distributed", None)
    trail.append(
        "secagg_survivors",
        {
            "site": runtime.site,
            "survivors": sorted(state["survivor_sites"]),
            "members": sorted(
                [int(n), str(s)] for n, s in zip(state["survivors"], state["survivor_sites"], strict=True)
            ),
            "honest_min": None if plan is None else plan.honest_min,
        },
        state["round_id"] if isinstance(state["round_id"], int) else None,
    )


def _distributed_plan(runtime: SiteRuntime) -> Any:
    return getattr(getattr(runtime, "privacy", None), "distributed", None)


def _reveal_marks(state: Payload) -> list[str]:
    marks = state.get(NOISE_REVEALS, [])
    if not isinstance(marks, list) or not all(isinstance(m, str) for m in marks):
        raise SecAggRefused(f"this site's record of revealed noise layers ({NOISE_REVEALS}) is corrupt")
    return list(marks)


def _check_not_revealed(state: Payload, request: Payload) -> None:
    """One reveal a round, ever: a second unmask request (the protocol refuses it too) or one after
    the protocol was restarted for the round finds the round already marked."""
    asked = request.get("round_id")
    if str(asked) in _reveal_marks(state):
        raise SecAggRefused(
            f"distributed DP: this site already answered round {asked!r}'s noise-layer reveal; "
            "no second unmask is answered"
        )


def _confirmed_count(state: Payload, request: Payload) -> int:
    """m: this site and the neighbours whose confirmations of its set verified (the request is not
    read: the server's count is only compared with this one)."""
    return len(state.get("confirmed_nodes", []))


def _reveal_layers(
    runtime: SiteRuntime, request: Payload, reply: Payload, state: Payload
) -> tuple[Payload, Payload]:
    """The unmask reply with the seeds of the noise layers the confirmed survivor count frees.

    m is this site's own count, never the server's: itself and every neighbour whose confirmation of
    the set it confirmed verified (`secagg_client`: each honest one of them is in the sum). The
    server's count (`noise_survivors`) must be that m, or the site refuses and reveals nothing (its
    state has moved past the unmask: nothing more is answered this round). The round is marked
    revealed either way, and the reveal is logged, signed, before it leaves."""
    from secure_fed.dp.distributed import SEED_BYTES, kept_variance, layers_for, removable_layers, rungs

    plan = _distributed_plan(runtime)
    round_id = state["round_id"]
    marked = {**state, NOISE_REVEALS: [*_reveal_marks(state), str(round_id)]}
    confirmed = [int(n) for n in state.get("confirmed_nodes", [])]
    m = _confirmed_count(state, request)
    asked = request.get(NOISE_SURVIVORS)
    if isinstance(asked, bool) or not isinstance(asked, int) or asked != m:
        return {
            "error": f"distributed DP: the server sizes the noise for {asked!r} survivors, this site "
            f"confirmed {m} (itself and the confirmations it verified); no unmasking share sent",
            "code": "secagg",
        }, marked
    if not plan.honest_min <= m <= plan.max_sites:
        return {
            "error": f"distributed DP: {m} confirmed survivors lies outside [h, n] = "
            f"[{plan.honest_min}, {plan.max_sites}]; no unmasking share sent",
            "code": "secagg",
        }, marked
    kept = runtime.stash.get("noise_layers")
    seeds = (
        []
        if kept is None
        else [bytes(row) for row in np.asarray(kept, dtype=np.uint8).reshape(-1, SEED_BYTES)]
    )
    # a share kept without its layers (or with another plan's count) reveals nothing: its whole noise stays
    index = layers_for(plan, m) if len(seeds) == len(removable_layers(plan)) else []
    keeps = plan.share_mu - sum(removable_layers(plan)[i] for i in index)
    trail = getattr(runtime, "trail", None)
    if trail is not None and not trail.log.closed:
        site_of = dict(zip(state["survivors"], state["survivor_sites"], strict=True))
        trail.append(
            "noise_layers_revealed",
            {
                "site": runtime.site,
                "survivors": m,
                "confirmed": sorted(str(site_of[n]) for n in confirmed if n in site_of),
                "layers": index,
                "kept_variance": keeps,
                "sized_for": kept_variance(plan, m),
                "rungs": rungs(plan),
                "honest_min": plan.honest_min,
                "colluders": plan.colluders,
                "mu_total": plan.mu_total,
            },
            round_id if isinstance(round_id, int) else None,
        )
    reveal = {NOISE_SURVIVORS: m, NOISE_LAYER_INDEX: index, NOISE_LAYER_SEEDS: [seeds[i] for i in index]}
    return {**reply, **reveal}, marked


def _secagg_rules(runtime: SiteRuntime) -> vector_sum.SiteRules:
    """What the site sets for a secure sum of its stashed update, not the server: its own
    quantisation (its policy's secagg.clip and bits), the sites of the factor vector the update was
    scaled for, and its training round (one secure sum per training round, whatever bytes a
    retrained round produces: without DP a global moved by one ulp gives new bytes)."""
    upload_round = runtime.stash.get("upload_round")
    privacy = getattr(runtime, "privacy", None)
    plan = getattr(privacy, "distributed", None)
    return vector_sum.SiteRules(
        quantisation=vector_sum.SiteQuantisation(clip=runtime.cfg.secagg.clip, bits=runtime.cfg.secagg.bits),
        members=tuple(str(s) for s in runtime.stash.get("secagg_members", [])),
        upload_id=None if upload_round is None else f"training-round-{int(upload_round)}",
        # distributed DP: the upload is this site's noise share in its own ring, unmasked only
        # with at least h sites in the survivor set h sites confirmed
        ring_bits=None if plan is None else plan.bits,
        honest_min=None if plan is None else plan.honest_min,
        colluders=runtime.cfg.dp.colluders,
    )


def _refusal_code(err: Exception) -> str:
    if isinstance(err, Refusal):
        return err.code
    return "policy" if isinstance(err, PolicyViolation) else "secagg"


def _stopped_early(request: Payload) -> str | None:
    reason = request.get("stopped_early")
    return str(reason) if reason else None
