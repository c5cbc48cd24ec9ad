"""The server's run loop: rounds, checkpoints, resume, final evaluation, metrics.json.

Runtime-agnostic: it talks to sites only through a Transport, so the Flower ServerApp (simulation
or SuperLink) and the in-process engine run the very same loop.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from secure_fed.config import RunConfig
from secure_fed.crypto.secagg_protocol import SecAggAbort
from secure_fed.crypto.transport import Transport
from secure_fed.eval.metrics import REPORT_SCORES
from secure_fed.protocol.failures import LOST_WORKER, Failure, one_line, signed_reason
from secure_fed.protocol.stops import raise_pending_stop
from secure_fed.server.aggregation import AggregationSettings
from secure_fed.server.averaging import AverageMismatch, IterateAverage
from secure_fed.server.checkpoint import load_checkpoint, save_checkpoint
from secure_fed.server.dropouts import DropoutTolerance, dropout_tolerance
from secure_fed.server.participation import sample_sites
from secure_fed.server.strategies import RoundContext, RoundResult, make_strategy
from secure_fed.server.strategies.base import TooFewSites

log = logging.getLogger(__name__)

EventSink = Callable[[str, dict[str, Any], int | None], None]


@dataclass
class RunOutcome:
    metrics: dict[str, Any]
    stopped_early: str | None = None
    per_round: list[dict[str, Any]] = field(default_factory=list)
    # sites whose `finish` failed: their logs lack their end record (site → our reason; the fix)
    unfinished: dict[str, str] = field(default_factory=dict)


def _no_events(event: str, payload: dict[str, Any], round_id: int | None) -> None:
    return None


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class RunAborted(ValueError):
    """The run cannot go on (or could not start) safely; every log was closed with `run_aborted`.
    The message is the console's; `code` (a key of `failures.SIGNED_REASONS`) is what is signed."""

    def __init__(self, message: str, code: str = "run_rule") -> None:
        super().__init__(message)
        self.code = code

    def __reduce__(self) -> tuple[Any, ...]:  # it crosses the simulation process's pipe
        return (RunAborted, (str(self), self.code))


class SitesLost(RuntimeError):
    """Sites' worker processes ended (the out-of-memory monitor, a kill, a crash) and the run cannot
    go on without them. The server's log ends with a signed `run_aborted` carrying `code` and this
    message (our words only) and no head record, the sites are told nothing (their workers are
    gone), and the last checkpoint stays: `--resume` continues once the cause is dealt with."""

    def __init__(self, what: str, code: str, lost: dict[str, Failure]) -> None:
        who = "; ".join(f"{site}: {found.reason}" for site, found in sorted(lost.items()))
        super().__init__(f"{what} ({who})" if who else what)
        self.what, self.code, self.lost = what, code, lost

    def __reduce__(self) -> tuple[Any, ...]:  # it crosses the simulation process's pipe
        return (SitesLost, (self.what, self.code, self.lost))

    def console_line(self, folder: Path | str) -> str:
        """The console's closing line: the sites' own lines said each cause already."""
        fixes = "; ".join(dict.fromkeys(found.fix for found in self.lost.values()))
        return (
            f"{self.what}: the worker of {', '.join(sorted(self.lost))} ended; {fixes}, then "
            f"`secure-fed run --resume {folder}` continues from the last checkpoint"
        )


class MachineryFailed(RuntimeError):
    """The server's own code failed (not a site, not a budget, not a rule of the run): the run is
    not over. The server's log ends with a signed `run_aborted` carrying `code` and this reason (our
    words only), no log gets a head record and the sites are sent no `finish`, so `--resume`
    continues from the last checkpoint once the cause is dealt with."""

    def __init__(self, reason: str, code: str) -> None:
        super().__init__(reason)
        self.reason, self.code = reason, code

    def __reduce__(self) -> tuple[Any, ...]:  # it crosses the simulation process's pipe
        return (MachineryFailed, (self.reason, self.code))

    def console_line(self, folder: Path | str) -> str:
        return (
            f"{self.reason}; no log was closed: fix the cause (--verbose shows its traceback, as does "
            f"flower/simulation.log in a simulation), then `secure-fed run --resume {folder}` "
            "continues from the last checkpoint"
        )


class Orchestrator:
    def __init__(
        self,
        cfg: RunConfig,
        transport: Transport,
        nodes: list[int],
        initial_state: np.ndarray,
        out: Path,
        events: EventSink = _no_events,
        progress: Callable[[int, int, RoundResult], None] | None = None,
        copy_record: Callable[[dict[str, Any]], None] | None = None,
        announce: Callable[[str], None] | None = None,
        on_phase: Callable[[int, str], None] | None = None,
        expected: int | None = None,
    ) -> None:
        self.cfg = cfg
        self.transport = transport if on_phase is None else _Watched(transport, self, on_phase)
        self.nodes = sorted(nodes)
        # the federation's size as configured: sites absent at the start are dropouts already
        self.expected = max(expected or 0, len(self.nodes))
        self.initial_state = np.asarray(initial_state, dtype=np.float64)
        self.out = Path(out)
        self.events = events
        self.progress = progress
        self.copy_record = copy_record or (lambda record: None)
        self.site_deltas: dict[str, float] = {}
        self.aggregation = AggregationSettings.from_config(cfg)
        self.announce = announce or _say
        self.current_round = 0
        self.settled = 0  # the last round done with (completed or skipped)
        self.sites: dict[int, str] = {}
        self.test_per_site: dict[str, dict[str, float]] = {}
        self.skipped: list[dict[str, Any]] = []  # rounds with no aggregate: who left, who declined, why
        self.aborted = False  # set once `run_aborted` went to every log
        self.evaluation_failed: list[int] = []  # the nodes whose final evaluation failed (no refusal)

    def hello(self) -> dict[int, str]:
        # the method and rounds travel with hello: a deployed site learns them from the server that
        # runs them, whichever of the server's config file or `flwr run --run-config` set them
        request = {"method": self.cfg.fed.method, "rounds": self.cfg.fed.rounds}
        replies = self.transport.exchange("hello", {n: dict(request) for n in self.nodes})
        sites = {n: str(r["site"]) for n, r in replies.items() if "site" in r}
        missing = [n for n in self.nodes if n not in sites]
        if not sites:
            raise RuntimeError(f"no node answered hello: {[replies.get(n) for n in missing]}")
        if missing:  # a node the SuperLink still lists but that is gone (killed, unplugged)
            named = getattr(self.transport, "name", lambda node: f"Flower node {node}")
            self.announce(
                f"{len(missing)} node(s) the SuperLink lists did not answer hello "
                f"({', '.join(named(n) for n in missing)}); going on with "
                + ", ".join(sorted(sites.values()))
            )
            self.nodes = [n for n in self.nodes if n in sites]
        return sites

    def _check_dropouts(self, tolerance: DropoutTolerance) -> None:
        """`fed.dropouts` is asked of the federation as configured. A site that did not come is
        one of those dropouts, spent before round 1: the sites present must tolerate the rest, and
        no more may be missing than were allowed."""
        asked = self.cfg.fed.dropouts
        absent = self.expected - len(self.nodes)
        if absent:
            self.events(
                "sites_absent", {"expected": self.expected, "present": sorted(self.sites.values())}, None
            )
            self.announce(
                f"{absent} of {self.expected} configured sites absent at the start; present: "
                f"{', '.join(sorted(self.sites.values()))}"
            )
        if asked is None:
            return
        if absent > asked:
            raise RunAborted(
                f"{absent} of {self.expected} configured sites absent at the start, but fed.dropouts = "
                f"{asked}: start the missing sites' nodes, or raise fed.dropouts if the run may go on "
                "without them",
                "sites_absent",
            )
        if asked - absent > tolerance.run:
            raise RunAborted(tolerance.refusal(asked, absent), "dropouts_untolerated")

    def alive(self) -> list[int]:
        """The nodes that still answer (after a round lost sites mid-way)."""
        request = {"method": self.cfg.fed.method, "rounds": self.cfg.fed.rounds}
        replies = self.transport.exchange("hello", {n: dict(request) for n in self.nodes})
        return [n for n in self.nodes if "site" in replies.get(n, {})]

    def run(self, resume: bool = False) -> RunOutcome:
        try:
            return self._run(resume)
        except SitesLost as err:
            self.stop_resumable(err)
            raise
        except RunAborted as err:
            # a rule of the run (too few sites, a budget, a refused setting): it ends here for good
            self.abort(err)
            raise
        except Exception as err:
            # the server's own machinery: sealing the logs would end a run that a fix can resume
            log.info("the run stopped on an error of its own", exc_info=err)  # --verbose shows it
            code, reason = signed_reason(err)
            stop = MachineryFailed(reason, code)
            self.stop_resumable(stop)
            raise stop from err

    def stop_resumable(self, err: SitesLost | MachineryFailed) -> None:
        """Sign why the run stopped in the server's log and leave every log open for `--resume`:
        no head record, and no `finish` to sites whose workers are gone (one that answered would
        close its log for good)."""
        round_id = self.interrupted_round()
        # MachineryFailed's reason is already the allow-listed words for the error beneath it; its
        # code ("internal") would read as a site's fault if looked up again
        reason = err.reason if isinstance(err, MachineryFailed) else signed_reason(err)[1]
        # `resumable` tells `audit verify` that the sites, told nothing, stopped with the run here
        payload = {"reason": reason, "code": err.code, "round": round_id, "resumable": True}
        try:
            self.events("run_aborted", payload, round_id)
        except Exception:  # noqa: BLE001 (the stop itself must reach the caller)
            log.exception("could not log run_aborted")

    def _lost_workers(self, nodes: list[int]) -> dict[str, Failure]:
        """The sites among ``nodes`` whose worker process ended (the transport's failures since the
        round began): the run stops for `--resume`, not for good."""
        failures: dict[int, Failure] = getattr(self.transport, "failures", {})
        return {
            self.sites.get(n, str(n)): failures[n]
            for n in nodes
            if n in failures and failures[n].kind in LOST_WORKER
        }

    def _forget_failures(self) -> None:
        failures = getattr(self.transport, "failures", None)
        if isinstance(failures, dict):
            failures.clear()

    def _lost(self, what: str, lost: dict[str, Failure]) -> SitesLost:
        kinds = list(dict.fromkeys(found.kind for found in lost.values()))
        return SitesLost(what, kinds[0] if len(kinds) == 1 else "workers_lost", lost)

    def interrupted_round(self) -> int | None:
        """The round a stop signal cuts short: the one under way, or the next to start when the
        signal lands between rounds; None once every round is done (the final evaluation)."""
        return self.settled + 1 if self.settled < self.cfg.fed.rounds else None

    def abort(self, err: BaseException) -> None:
        """Close every party's log with a signed `run_aborted` record: the server's through the
        event sink (its caller closes that log), each site's through `finish` with the reason."""
        code, reason = signed_reason(err)
        log.info("run aborted (%s): %s", code, err)  # the message, unsigned; the signed record has the code
        round_id = self.current_round or None
        sites = getattr(self, "sites", {})
        self.aborted = True
        try:
            self.events("run_aborted", {"reason": reason, "code": code, "round": round_id}, round_id)
        except Exception:  # noqa: BLE001 (the abort itself must reach the sites and the caller)
            log.exception("could not log run_aborted")
        try:
            request = {"stopped_early": f"run aborted: {reason}", "aborted": True}
            self.transport.exchange("finish", {n: dict(request) for n in self.nodes if n in sites})
        except Exception:  # noqa: BLE001
            log.exception("could not tell the sites the run aborted")

    def _run(self, resume: bool = False) -> RunOutcome:
        cfg = self.cfg
        self.current_round = self.settled = 0
        sites = self.sites = self.hello()
        if hasattr(self.transport, "name_sites"):
            self.transport.name_sites(sites)
        tolerance = dropout_tolerance(cfg, len(self.nodes), self.aggregation)
        self.announce(tolerance.describe())
        self._check_dropouts(tolerance)
        strategy = make_strategy(cfg.fed.method, self.initial_state.size, cfg.data.max_visits, cfg)
        checkpoint_dir = self.out / "checkpoint"
        state, first_round, per_round = self.initial_state.copy(), 1, []
        # the server's model after each round is an iterate: released ones, so averaging is free
        average = IterateAverage.from_config(cfg, cfg.fed.rounds)
        if resume:
            state, first_round, per_round = self._resume(checkpoint_dir, strategy, average, state)
        stopped = None
        upload_bytes = upload_size(strategy.upload_dim(), len(self.nodes), self.aggregation)
        floor = max(cfg.fed.min_sites, 3 if cfg.secagg_on else 1)
        for r in range(first_round, cfg.fed.rounds + 1):
            raise_pending_stop()
            nodes = sample_sites(self.nodes, cfg.fed.participation, cfg.seed, r, floor)
            if cfg.fed.participation < 1:
                self.events(
                    "participation",
                    {"fraction": cfg.fed.participation, "sampled": [sites[n] for n in nodes]},
                    r,
                )
            ctx = RoundContext(
                round=r,
                transport=self.transport,
                nodes=nodes,
                sites=sites,
                cfg=cfg,
                aggregation=self.aggregation,
                log_event=lambda event, payload, r=r: self.events(event, payload, r),
                copy_site_record=self.copy_record,
                site_deltas=self.site_deltas,
            )
            started = time.perf_counter()
            self.current_round = r
            self._forget_failures()
            try:
                result = strategy.run_round(ctx, state)
            except TooFewSites as err:
                stopped = self._stop_for_too_few(err, r, nodes, per_round)
                break
            except SecAggAbort as err:
                self._skip_round(err, r, nodes, ctx, tolerance)
                continue
            state = result.global_state
            if average is not None:
                average.update(state, r)
            per_round.append(self._round_row(r, result, started))
            self._settle_round(r, result, state, strategy, average, per_round, checkpoint_dir)
        return self._finish(state, stopped, strategy, average, per_round, upload_bytes)

    def _resume(
        self, checkpoint_dir: Path, strategy: Any, average: IterateAverage | None, state: np.ndarray
    ) -> tuple[np.ndarray, int, list[dict[str, Any]]]:
        """(state, first round, rows so far) from the last checkpoint, restoring the strategy and the
        iterate average; refuses a checkpoint that cannot continue under this run's settings."""
        cfg = self.cfg
        loaded = load_checkpoint(checkpoint_dir)
        if loaded is None:  # stopped in round 1: the run goes on from its start, its logs kept
            log.info("resuming at round 1: no round was completed before the stop")
            return state, 1, []
        done, state, strategy_state, meta, saved_average = loaded
        if average is not None:
            if saved_average is None:
                raise RunAborted(
                    f"--resume: the checkpoint after round {done} kept no iterate average, but "
                    f"train.average = {cfg.train.average!r}: resume with the settings the run was "
                    "started with, or start a new run",
                    "resume_mismatch",
                )
            try:
                average.load_state_dict(saved_average)
            except AverageMismatch as err:
                raise RunAborted(f"--resume: {err}", "resume_mismatch") from None
        strategy.load_state_dict(strategy_state)
        per_round = list(meta.get("per_round", []))
        self.skipped = list(meta.get("skipped_rounds", []))
        self.settled = done
        log.info("resuming after round %d", done)
        return state, done + 1, per_round

    def _stop_for_too_few(
        self, err: TooFewSites, r: int, nodes: list[int], per_round: list[dict[str, Any]]
    ) -> str:
        """The run stops early (its reason returned) when too few sites could train round r; it
        fails instead when workers were lost (resumable) or when no round trained at all."""
        lost = self._lost_workers(nodes)
        if lost:
            raise self._lost(f"round {r} stopped: too few sites could train", lost) from None
        if not per_round:  # nothing trained: no model to evaluate, the run failed
            raise RunAborted(
                f"{err}\n  no round completed; nothing is evaluated", "no_round_completed"
            ) from None
        stopped = signed_reason(err)[1]
        log.warning("%s", err)
        self.events("run_stopped", {"reason": stopped, "code": "too_few_sites"}, r)
        return stopped

    def _skip_round(
        self, err: SecAggAbort, r: int, nodes: list[int], ctx: RoundContext, tolerance: DropoutTolerance
    ) -> None:
        """Sites left mid-round, or too few took part: no aggregate, the model stays. Go on with
        those that answer, as long as a secure sum keeps its minimum of survivors."""
        sites = self.sites
        lost = self._lost_workers(nodes)
        alive = self.alive()
        gone = [sites[n] for n in self.nodes if n not in alive]
        if lost and len(alive) < tolerance.fewest:
            raise self._lost(f"round {r} stopped: too few sites left for its sum", lost) from None
        declined = {s: one_line(why) for s, why in ctx.declined.items() if s not in gone}
        skip = {"reason": signed_reason(err)[1], "dropped": gone, "declined": declined}
        self.events("round_skipped", dict(skip), r)
        self.skipped.append({"round": r, **skip})
        why = "".join(f"; {site} declined: {reason}" for site, reason in sorted(declined.items()))
        self.announce(f"round {r} skipped: {err}{why}; sites gone: {', '.join(gone) or 'none'}")
        if len(alive) >= tolerance.fewest:
            self.announce(f"the run goes on with {len(alive)} sites (at least {tolerance.fewest})")
        if len(alive) < tolerance.fewest:
            raise RunAborted(tolerance.abort_message(len(alive), gone), "too_few_survivors") from err
        self.settled = r
        self.nodes = alive

    def _round_row(self, r: int, result: RoundResult, started: float) -> dict[str, Any]:
        """Round r's line of metrics.json."""
        sites = self.sites
        return {
            "round": r,
            "val_loss": result.val_loss,
            "train_loss": result.train_loss,
            "alpha": result.alpha,
            "participants": [sites[n] for n in result.participants],
            "declined": result.declined,
            "dropped": [sites[n] for n in result.dropped],
            "epsilon": result.epsilon,
            "quantisation_bound": result.quantisation_bound,
            "seconds": round(time.perf_counter() - started, 3),
        }

    def _settle_round(
        self,
        r: int,
        result: RoundResult,
        state: np.ndarray,
        strategy: Any,
        average: IterateAverage | None,
        per_round: list[dict[str, Any]],
        checkpoint_dir: Path,
    ) -> None:
        """Round r is done once its checkpoint is saved (and signed); only then is it settled."""
        if result.alpha is not None:
            self.events("alpha", {"alpha": result.alpha}, r)
        meta_out = {"per_round": per_round, "skipped_rounds": self.skipped}
        raise_pending_stop()  # a round a stop cut short is not saved as done
        save_checkpoint(
            checkpoint_dir,
            r,
            state,
            strategy.state_dict(),
            meta_out,
            average.state_dict() if average is not None else None,
            # signed: `--resume` refuses a state.pt whose hash no checkpoint record names
            record=lambda digest, r=r: self.events(
                "checkpoint", {"round": r, "file": "state.pt", "sha256": digest}, r
            ),
        )
        self.settled = r
        if self.progress is not None:
            self.progress(r, self.cfg.fed.rounds, result)

    def _finish(
        self,
        state: np.ndarray,
        stopped: str | None,
        strategy: Any,
        average: IterateAverage | None,
        per_round: list[dict[str, Any]],
        upload_bytes: int,
    ) -> RunOutcome:
        """Evaluate the released model, end every site's run, and write metrics.json and the model."""
        cfg, sites = self.cfg, self.sites
        if not per_round:  # every round was skipped: there is no trained model to score
            raise RunAborted(
                f"no round of {cfg.fed.rounds} completed; nothing is evaluated", "no_round_completed"
            )
        raise_pending_stop()
        self._forget_failures()
        raw, state = state, average.released(state) if average is not None else state
        test = self.evaluate(state, stopped)
        if not self.test_per_site and self.evaluation_failed:
            # no score of the model because sites failed (not because each declined by its own
            # rule, as a deployed site does for a test split scored in an earlier run): the run has
            # no result, so it is not written as one
            lost = self._lost_workers(self.nodes)
            if lost:
                raise self._lost("no site evaluated the final model", lost)
            raise RunAborted("no site evaluated the final model; see the sites' lines above", "no_evaluation")
        finished = self.transport.exchange("finish", {n: _end(stopped) for n in self.nodes})
        failures: dict[int, Failure] = getattr(self.transport, "failures", {})
        unfinished = {
            sites[n]: (f"{failures[n].reason}; {failures[n].fix}" if n in failures else "it did not answer")
            for n in self.nodes
            if not (isinstance(finished.get(n), dict) and finished[n].get("status", "ok") == "ok")
        }
        ended = self._site_privacy_at_end(finished)
        final_alpha = getattr(strategy, "alpha", None)
        metrics: dict[str, Any] = {
            "method": cfg.fed.method,
            "seed": cfg.seed,
            "rounds": len(per_round),
            "test": test,
            "test_per_site": self.test_per_site,
            "alpha": [float(a) for a in final_alpha()] if callable(final_alpha) else None,
            "per_round": per_round,
            "upload_bytes_per_site_per_round": upload_bytes,
            "secure_aggregation": self.aggregation.mode,
            "he": self.aggregation.he is not None,
            "stopped_early": stopped,
            "skipped_rounds": self.skipped,
        }
        if cfg.dp.noise_free_reference:
            metrics["privacy"] = NOISE_FREE_PRIVACY
        elif cfg.dp.enabled:
            metrics["privacy"] = privacy_summary(per_round, self.site_deltas, ended, cfg.dp.accountant)
        if average is not None:
            metrics["average"] = average.settings() | {"iterates": average.count}
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "metrics.json").write_text(json.dumps(metrics, indent=1, default=_json_default))
        np.save(self.out / "global_adapters.npy", state)  # what was evaluated: the released model
        if average is not None:
            np.save(self.out / "last_iterate.npy", raw)
        self.final_state = state
        return RunOutcome(metrics=metrics, stopped_early=stopped, per_round=per_round, unfinished=unfinished)

    def _site_privacy_at_end(self, replies: dict[int, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Each site's ε as its accountant holds it at the end (every population, the whole run,
        before a resume too), from its `finish` reply; its last privacy records (the final α
        release) come with it and go into the server's log like every other round's."""
        ended: dict[str, dict[str, Any]] = {}  # {"rdp", "prv", "population"}
        for node, reply in replies.items():
            for record in reply.get("audit_records", []) if isinstance(reply, dict) else []:
                self.copy_record(json.loads(record))
            if not isinstance(reply, dict) or "epsilon_rdp" not in reply:
                continue
            prv = float(reply.get("epsilon_prv", float("nan")))
            site = self.sites.get(node, str(node))
            ended[site] = {"rdp": float(reply["epsilon_rdp"]), "prv": None if np.isnan(prv) else prv}
            if isinstance(reply.get("epsilon_population"), str):
                ended[site]["population"] = reply["epsilon_population"]
            if "delta" in reply:
                self.site_deltas[site] = float(reply["delta"])
        return ended

    def evaluate(self, state: np.ndarray, stopped: str | None = None) -> dict[str, float]:
        """Each site scores its own test split once, for the final model; only corpus-level figures
        come back, each with a power-of-two weight (sites do not release exact test-set sizes)."""
        request = {"global": state, "split": "test", **_end(stopped)}
        replies = self.transport.exchange("evaluate", {n: dict(request) for n in self.nodes})
        # each site's own figures reached the server anyway; kept apart, they make per-site tables
        self.test_per_site = {
            self.sites.get(n, str(n)): {
                k: float(v) for k, v in r.items() if k not in ("status", "weight") and _number(v)
            }
            for n, r in sorted(replies.items())
            if r.get("status") == "ok"
        }
        scored = sorted(
            {f"{self.sites.get(n, str(n))}: {r['scored']}" for n, r in replies.items() if r.get("scored")}
        )
        if scored:
            # a deployed site scores the last global it trained from, never weights sent for the
            # scoring alone: the test figures are for that model, not for the final aggregate
            self.announce(f"test scores are for the model each site last trained from ({'; '.join(scored)})")
        self.evaluation_failed = [
            n for n in self.nodes if n not in replies or replies[n].get("status", "error") == "error"
        ]
        return pool_scores(list(replies.values()))


class _Watched:
    """The transport, telling an observer (the console's progress) which phase of which round is
    on the wire: a round of SecAgg+ and CKKS has nine, and some take minutes."""

    def __init__(self, inner: Transport, owner: Orchestrator, on_phase: Callable[[int, str], None]) -> None:
        self.inner, self.owner, self.on_phase = inner, owner, on_phase

    def exchange(self, phase: str, requests: Any) -> dict[int, dict[str, Any]]:
        self.on_phase(self.owner.current_round, phase)
        return self.inner.exchange(phase, requests)

    def __getattr__(self, name: str) -> Any:  # anything else a transport offers, unchanged
        return getattr(self.inner, name)


def _end(stopped: str | None) -> dict[str, Any]:
    """A site ends training (scores its test split, closes its log) before the last round only
    when told why; it then acts on no further training."""
    return {"stopped_early": stopped} if stopped else {}


def pool_scores(replies: list[dict[str, Any]]) -> dict[str, float]:
    """Sites' corpus-level scores averaged with the weights they released."""
    rows = [r for r in replies if r.get("status") == "ok" and r.get("weight", 0) > 0]
    sent = [k for r in rows for k, v in r.items() if k not in ("status", "weight") and _number(v)]
    # the report metrics in their order, then an algorithm's own (FM2's accuracy) as sites sent them
    names = list(dict.fromkeys([*(n for n in REPORT_SCORES if n in sent or not rows), *sent]))
    out: dict[str, float] = {}
    for name in names:
        pairs = [
            (float(r[name]), int(r["weight"])) for r in rows if name in r and not np.isnan(float(r[name]))
        ]
        out[name] = sum(v * n for v, n in pairs) / sum(n for _, n in pairs) if pairs else float("nan")
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float | np.floating) and not isinstance(value, bool)


def upload_size(dim: int, n_sites: int, aggregation: AggregationSettings) -> int:
    """Bytes one site uploads for the update: float64 values, or SecAgg+ ring words (+ its count)."""
    if aggregation.secagg is None:
        return dim * 8
    from secure_fed.crypto.quantize import ring_dtype
    from secure_fed.crypto.secagg_protocol import round_params

    params = round_params(n_sites, dim, aggregation.secagg)
    return ring_dtype(params.modulus_bits).itemsize * (dim + 1)


# what a noise-free reference's metrics say of privacy: no ε at all (a number would read as one)
NOISE_FREE_PRIVACY: dict[str, Any] = {
    "noise_free_reference": True,
    "epsilon": None,
    "note": "not private: the private recipe's sampling and clipping with no noise, ε = ∞",
}


def privacy_summary(
    per_round: list[dict[str, Any]],
    deltas: dict[str, float],
    ended: dict[str, dict[str, Any]] | None = None,
    accountant: str = "rdp",
) -> dict[str, Any]:
    """metrics.json's privacy block: each site's cumulative ε at the end of the run as the site's
    accountant holds it (its `finish` reply: what its last privacy records say, every population,
    releases before a resume and after the last round's training included); a site that sent none
    keeps its ε after its last admitted round. `accountant`: the one the budget was enforced with,
    whose value a table reports as spent."""
    latest: dict[str, dict[str, Any]] = {}
    for row in per_round:
        latest.update(row.get("epsilon") or {})
    latest.update(ended or {})
    return {
        "accountant": accountant,
        "delta": max(deltas.values()) if deltas else None,
        "delta_per_site": deltas,
        "epsilon": latest,
        "per_round": [{"round": row["round"], "epsilon": row.get("epsilon") or {}} for row in per_round],
    }


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(type(value).__name__)
