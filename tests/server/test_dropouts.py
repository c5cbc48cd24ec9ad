"""Dropouts: what a run tolerates follows from the 3-survivor rule and the SecAgg+ threshold, is
said at start and enforced there; a site lost mid-round costs that round, not the run; an abort
ends every party's log with a signed `run_aborted` record, and an untrained model is never scored.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from secure_fed.audits.keys import load_public_keys
from secure_fed.config import RunConfig
from secure_fed.crypto.secagg_protocol import round_params
from secure_fed.data.sites import site_names
from secure_fed.launch.runner import make_site_handler, run_id_for, run_keys_dir
from secure_fed.registry import initial_state
from secure_fed.server.aggregation import AggregationSettings
from secure_fed.server.orchestrator import Orchestrator, RunAborted, RunOutcome, dropout_tolerance
from secure_fed.server.trail import ServerTrail
from secure_fed.server.transports import InProcessTransport
from secure_fed.site.runtime import SiteRuntime
from secure_fed.verifier.report import render_html
from secure_fed.verifier.report_data import collect
from secure_fed.verifier.verify import verify_logs


class KillAfter:
    """A transport on which one node dies right after it answered `phase` of round 1 (its reply is
    lost with it) and never answers again — `kill -9` of a hospital's node mid-round."""

    def __init__(self, inner: InProcessTransport, victim: int, phase: str) -> None:
        self.inner, self.victim, self.phase, self.dead = inner, victim, phase, False

    def exchange(self, phase: str, requests: Mapping[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        if self.dead:
            requests = {n: r for n, r in requests.items() if n != self.victim}
        replies = self.inner.exchange(phase, requests)
        if phase == self.phase and not self.dead:
            self.dead = True
            replies.pop(self.victim, None)
        return replies


def run_with(
    cfg: RunConfig, wrap: Callable[[InProcessTransport], Any] = lambda t: t, absent: int = 0
) -> tuple[RunOutcome | None, RunAborted | None, list[str]]:
    """run_inprocess's wiring with a transport of our choosing; the server's log closed the way the
    ServerApp closes it (signed head after `run_aborted`). `absent`: the last sites' nodes never
    come (as when a SuperNode is down when the run starts)."""
    names = site_names(cfg)
    keys_dir = run_keys_dir(cfg, names)
    run_id = run_id_for(cfg.out)
    handlers = {
        node: make_site_handler(SiteRuntime.create(cfg, site, keys_dir=keys_dir, run_id=run_id), None)
        for node, site in enumerate(names[: len(names) - absent])
    }
    assert keys_dir is not None
    trail = ServerTrail(Path(cfg.out) / "audit" / "server.jsonl", run_id, keys_dir)
    trail.start(cfg, keys_dir)
    said: list[str] = []
    orchestrator = Orchestrator(
        cfg,
        wrap(InProcessTransport(handlers)),
        list(handlers),
        initial_state(cfg),
        cfg.out,
        events=trail.event,
        copy_record=trail.copy,
        announce=said.append,
        expected=len(names),
    )
    try:
        outcome = orchestrator.run()
    except RunAborted as err:
        assert orchestrator.aborted
        trail.log.close()
        return None, err, said
    trail.finish(orchestrator.final_state)
    return outcome, None, said


def records(out: Path, party: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "audit" / f"{party}.jsonl").read_text().splitlines()]


def test_tolerance_follows_from_the_survivor_rule_and_the_threshold(make_config) -> None:
    for sites in (3, 4, 5, 7, 10):
        cfg = make_config(secagg__enabled=True, data__synth__sites=sites)
        aggregation = AggregationSettings.from_config(cfg)
        tolerance = dropout_tolerance(cfg, sites, aggregation)
        params = round_params(sites, 1, aggregation.secagg)  # type: ignore[arg-type]
        assert tolerance.fewest == 3 and tolerance.run == sites - 3
        assert tolerance.in_round == min(sites - 3, params.degree - params.threshold)
        line = tolerance.describe()
        assert f"tolerates {sites - 3} " in line and "at least 3" in line
        assert f"threshold {params.threshold} of {params.degree} neighbours" in line
        # a round's SecAgg+ abort says "N sites left, at least M needed": the start line says M too
        assert f"SecAgg+ needs {sites - tolerance.in_round} of its {sites} sites" in line
        # the abort message states the same numbers as the start line
        abort = tolerance.abort_message(2, ["site0"])
        assert f"2 of {sites} sites left" in abort and "at least 3 needed" in abort
        assert f"tolerates {sites - 3} dropout" in abort and "add sites" in abort
    plain = make_config(data__synth__sites=3, fed__min_sites=2)
    assert dropout_tolerance(plain, 3, AggregationSettings.from_config(plain)).run == 1


def test_a_configuration_that_tolerates_none_is_refused_at_start(make_config) -> None:
    cfg = make_config("refused", secagg__enabled=True, fed__dropouts=1, fed__method="fedavg")
    outcome, aborted, said = run_with(cfg)
    assert outcome is None and aborted is not None
    assert (
        "fed.dropouts = 1" in str(aborted) and "tolerates 0" in str(aborted) and "add sites" in str(aborted)
    )
    assert said and said[0].startswith("dropouts: 3 sites; the run tolerates 0")
    assert not (cfg.out / "checkpoint").exists()  # nothing trained
    for party in ("server", "site0", "site1", "site2"):
        log = records(cfg.out, party)
        assert [r["event"] for r in log[-2:]] == ["run_aborted", "head"], party
        assert not any(r["event"] == "instruction" and r["payload"]["phase"] == "train" for r in log)
    logs = sorted((cfg.out / "audit").glob("*.jsonl"))
    result = verify_logs(logs, load_public_keys(run_keys_dir(cfg, site_names(cfg))))
    assert result.ok, [str(p) for p in result.problems]


def test_sites_refusing_the_first_round_fail_the_run_without_scoring_an_untrained_model(make_config) -> None:
    cfg = make_config(
        "declined",
        dp__enabled=True,
        dp__noise_multiplier=2.0,
        dp__target_epsilon=3.0,
        dp__budget_epsilon=0.5,  # below what one round costs: every site declines round 1
        dp__sample_rate=0.5,
        fed__method="fedavg",
    )
    outcome, aborted, _ = run_with(cfg)
    assert outcome is None and aborted is not None and "no round completed" in str(aborted)
    assert not (cfg.out / "metrics.json").exists()
    for site in ("site0", "site1", "site2"):
        log = records(cfg.out, site)
        assert any(r["event"] == "budget_refusal" for r in log)  # the refusal is in the site's own log
        assert not any(r["event"] == "instruction" and r["payload"]["phase"] == "evaluate" for r in log)
        assert [r["event"] for r in log[-2:]] == ["run_aborted", "head"]
    assert [r["event"] for r in records(cfg.out, "server")[-2:]] == ["run_aborted", "head"]
    logs = sorted((cfg.out / "audit").glob("*.jsonl"))
    page = render_html(collect(logs, None))
    assert "id='aborted'" in page and "The run was aborted" in page and "no round completed" in page


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["train", "secagg_shares"])
def test_a_site_killed_mid_round_costs_that_round_and_the_run_finishes_on_three(make_config, phase) -> None:
    cfg = make_config(
        f"killed-{phase}",
        secagg__enabled=True,
        data__synth__sites=4,
        fed__method="fedavg",
        fed__rounds=3,
        fed__dropouts=1,
    )
    outcome, aborted, said = run_with(cfg, lambda inner: KillAfter(inner, victim=3, phase=phase))
    assert aborted is None and outcome is not None, aborted
    assert said[0].startswith("dropouts: 4 sites; the run tolerates 1")
    assert any(line.startswith("round 1 skipped") and "site3" in line for line in said), said
    rounds = outcome.metrics["per_round"]
    assert [r["round"] for r in rounds] == [2, 3]
    assert all(r["participants"] == ["site0", "site1", "site2"] for r in rounds)
    skipped = [r for r in records(cfg.out, "server") if r["event"] == "round_skipped"]
    assert [(r["round"], r["payload"]["dropped"]) for r in skipped] == [(1, ["site3"])]
    assert outcome.metrics["test"]  # the three survivors scored the trained model
    keys = load_public_keys(run_keys_dir(cfg, site_names(cfg)))
    survivors = [cfg.out / "audit" / f"{p}.jsonl" for p in ("server", "site0", "site1", "site2")]
    result = verify_logs(survivors, keys)
    assert result.ok, [str(p) for p in result.problems]
    # the killed site's log stops where it died: the server's signed round_skipped explains it, so
    # verify names a dropout (round 1), not a problem, and the run is not complete
    every = verify_logs([*survivors, cfg.out / "audit" / "site3.jsonl"], keys)
    assert every.problems == [] and not every.complete
    assert [(d.site, d.round) for d in every.dropouts] == [("site3", 1)]
    # the compliance report names the skipped round and who left
    page = render_html(collect(survivors, result))
    assert "id='skipped'" in page and "round 1 (sites gone: site3)" in page


@pytest.mark.slow  # a whole run in process: make test-fast leaves it out
def test_a_site_absent_at_the_start_is_one_of_the_dropouts_the_run_tolerates(make_config) -> None:
    """Four sites configured with fed.dropouts = 1, three nodes come (the fourth died in an earlier
    run): the absent site spends the one dropout, the three go on, and the log and report say so."""
    cfg = make_config(
        "absent",
        secagg__enabled=True,
        data__synth__sites=4,
        fed__method="fedavg",
        fed__rounds=1,
        fed__dropouts=1,
    )
    outcome, aborted, said = run_with(cfg, absent=1)
    assert aborted is None and outcome is not None, aborted
    assert any("1 of 4 configured sites absent at the start" in line for line in said), said
    assert outcome.metrics["per_round"][0]["participants"] == ["site0", "site1", "site2"]
    absent = [r["payload"] for r in records(cfg.out, "server") if r["event"] == "sites_absent"]
    assert absent == [{"expected": 4, "present": ["site0", "site1", "site2"]}]
    logs = [cfg.out / "audit" / f"{p}.jsonl" for p in ("server", "site0", "site1", "site2")]
    page = render_html(collect(logs, None))
    assert "3 of 4 configured sites came to this run (site0, site1, site2)" in page


def test_more_sites_absent_than_the_run_tolerates_is_refused_at_start(make_config) -> None:
    cfg = make_config(
        "absent-refused",
        secagg__enabled=True,
        data__synth__sites=4,
        fed__method="fedavg",
        fed__rounds=1,
        fed__dropouts=0,
    )
    outcome, aborted, _ = run_with(cfg, absent=1)
    assert outcome is None and aborted is not None
    assert "1 of 4 configured sites absent at the start, but fed.dropouts = 0" in str(aborted)
    assert "start the missing sites' nodes" in str(aborted)
    assert not (cfg.out / "checkpoint").exists()


def test_an_aborted_inprocess_run_closes_the_servers_log(make_config) -> None:
    """`secure-fed run` itself (not the test wiring above): every site declines on budget, the run
    aborts, and the server's log ends with `run_aborted` and a signed head, not abandoned."""
    from secure_fed.launch.runner import run_inprocess

    # a fixed σ: a budget below a calibrated run's target is refused at load, before any run
    cfg = make_config(
        dp__enabled=True,
        dp__noise_multiplier=2.0,
        dp__target_epsilon=8.0,
        dp__budget_epsilon=0.01,
        fed__rounds=1,
    )
    with pytest.raises(RunAborted):
        run_inprocess(cfg, cfg.out)
    log = [json.loads(line) for line in (Path(cfg.out) / "audit" / "server.jsonl").read_text().splitlines()]
    assert [r["event"] for r in log[-2:]] == ["run_aborted", "head"]


def test_with_distributed_dp_the_start_line_counts_the_honest_minimum(make_config) -> None:
    """With dp.noise = "distributed" a site unmasks no sum of fewer than h survivors, so a run of 5
    sites at h = 4 (the default: all but c = 1) tolerates 1 dropout, not the 2 the 3-survivor rule
    alone allows; at h = 5 none, and the line says a lost site ends the run."""
    from tests.conftest import DISTRIBUTED_DP

    for h, tolerated in ((None, 1), (4, 1), (5, 0), (3, 2)):
        cfg = make_config(**{**DISTRIBUTED_DP, "dp__honest_min": h}, data__synth__sites=5)
        tolerance = dropout_tolerance(cfg, 5, AggregationSettings.from_config(cfg))
        line = tolerance.describe()
        assert tolerance.run == tolerated and f"the run tolerates {tolerated} " in line, line
        assert tolerance.fewest == max(3, 5 - tolerated)
        if tolerated < 2:
            assert f"fewer than h = {5 - tolerated} survivors (dp.honest_min)" in line, line
        if tolerated == 0:
            assert "a round that loses a site ends the run" in line and "the next goes on" not in line
        abort = tolerance.abort_message(5 - tolerated - 1, ["site4"])
        assert f"at least {5 - tolerated} needed" in abort


def test_a_run_that_tolerates_none_says_a_lost_site_ends_it(make_config) -> None:
    cfg = make_config(secagg__enabled=True, data__synth__sites=3)
    line = dropout_tolerance(cfg, 3, AggregationSettings.from_config(cfg)).describe()
    assert "tolerates 0" in line and "the next goes on" not in line and "ends the run" in line
