"""A site's ε belongs to its data: two runs in a row on the same site data, each in its own run
folder as a deployed site keeps them, the second starting from the first one's total; the budget
holds across runs; deleting the ledger is a logged operator action."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from secure_fed.audits.keys import load_public_keys
from secure_fed.cli import app
from secure_fed.config import RunConfig
from secure_fed.crypto.keys import init_keys
from secure_fed.data.sites import site_names
from secure_fed.launch.runner import lifetime_handler
from secure_fed.protocol.run_context import run_folder
from secure_fed.registry import initial_state
from secure_fed.server.orchestrator import Orchestrator, RunAborted
from secure_fed.server.trail import ServerTrail
from secure_fed.server.transports import InProcessTransport
from secure_fed.site.lifetime import site_ledger_of, site_run_config
from secure_fed.site.runtime import SiteRuntime
from secure_fed.site.site import deployment_site_key
from secure_fed.verifier.report import render_html
from secure_fed.verifier.report_data import collect
from secure_fed.verifier.verdict import population_words
from secure_fed.verifier.verify import verify_logs


def deployed_run(cfg: RunConfig, run_id: str, keys: Path) -> tuple[Path, RunAborted | None]:
    """One run as `flwr run` makes it: each party in <out>/runs/<run id>, sites on their
    persistent ledgers (what launch/client_app.py does for a deployed node), in one process."""
    folder = run_folder(cfg, run_id)
    run_cfg = site_run_config(cfg, run_id)
    handlers = {}
    for node, site in enumerate(site_names(cfg)):
        runtime = SiteRuntime.create(
            run_cfg, site, site_key=deployment_site_key(cfg, site), keys_dir=keys, run_id=run_id
        )
        runtime.deployed = True
        handlers[node] = lifetime_handler(runtime, runtime.lifetime, run_id)
    trail = ServerTrail(folder / "audit" / "server.jsonl", run_id, keys)
    trail.start(run_cfg, keys)
    orchestrator = Orchestrator(
        run_cfg,
        InProcessTransport(handlers),
        list(handlers),
        initial_state(cfg),
        folder,
        events=trail.event,
        copy_record=trail.copy,
        announce=lambda line: None,
    )
    try:
        orchestrator.run()
    except RunAborted as err:
        trail.log.close()
        return folder, err
    trail.finish(orchestrator.final_state)
    return folder, None


def budget_records(folder: Path, site: str) -> list[dict[str, Any]]:
    lines = (folder / "audit" / f"{site}.jsonl").read_text().splitlines()
    return [r["payload"] for r in map(json.loads, lines) if r["event"] == "site_budget"]


@pytest.mark.slow
def test_two_runs_on_the_same_site_data_continue_its_epsilon(make_config, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    init_keys(keys, ["server", "site0", "site1", "site2"])
    policy = {
        "dp__enabled": True,
        "dp__noise_multiplier": 2.0,
        "dp__alpha_noise_multiplier": 4.0,
        "dp__target_epsilon": 50.0,
        "dp__sample_rate": 0.5,
        "fed__method": "fedavg",
        "audit__keys_dir": str(keys),
    }
    cfg = make_config("site-out", **policy)
    first, aborted = deployed_run(cfg, "run-1", keys)
    assert aborted is None
    second, aborted = deployed_run(cfg, "run-2", keys)  # same out, same policy file: no edits
    assert aborted is None and first != second
    for site in ("site0", "site1", "site2"):
        start_1, end_1 = budget_records(first, site)
        start_2, end_2 = budget_records(second, site)
        assert start_1["lifetime_start"] == {}  # nothing spent before the first run
        assert start_1["dataset"] == start_2["dataset"]  # the same data meets the same ledger
        # the second run starts from the first one's total, population by population
        assert start_2["lifetime_start"] == end_1["lifetime"] == end_1["run"]
        assert set(end_2["lifetime"]) == {"train"}  # FedAvg releases no α: no validation charge
        for population in ("train",):
            lifetime, run = end_2["lifetime"][population]["rdp"], end_2["run"][population]["rdp"]
            # the same rounds, but the GMM histogram is paid for once: the second run refits from it
            assert run < end_1["run"][population]["rdp"]
            assert lifetime > run  # composed over both runs, not reset
    keyring = load_public_keys(keys)
    for folder in (first, second):  # one audit log per run, each verifies on its own
        result = verify_logs(sorted((folder / "audit").glob("*.jsonl")), keyring)
        assert result.ok, [str(p) for p in result.problems]
    # the second run's report shows each site's lifetime ε beside this run's
    page = render_html(collect(sorted((second / "audit").glob("*.jsonl")), None))
    end = budget_records(second, "site0")[1]
    worst = max(end["lifetime"], key=lambda population: end["lifetime"][population]["rdp"])
    total = end["lifetime"][worst]["rdp"]
    # the cell names whose ε it is: the population with the largest
    assert "<th>ε all runs</th>" in page
    assert f"<td class='num'>{total:.3g} ({population_words(worst)})</td>" in page

    # The budget holds across runs: a policy whose budget one more round would fit alone, but not
    # on top of what the two runs spent, is refused at round 1 and the run fails.
    lifetime = budget_records(second, "site0")[1]["lifetime"]
    spent = max(v["rdp"] for v in lifetime.values())
    one_round = json.loads((first / "metrics.json").read_text())["per_round"][0]["epsilon"]["site0"]["rdp"]
    tight = make_config("site-out", **{**policy, "dp__budget_epsilon": spent + 1e-3})
    assert one_round < tight.dp.budget_epsilon  # type: ignore[operator]
    third, aborted = deployed_run(tight, "run-3", keys)
    assert aborted is not None and "no round completed" in str(aborted)
    refusals = [
        json.loads(line)["payload"]
        for line in (third / "audit" / "site0.jsonl").read_text().splitlines()
        if json.loads(line)["event"] == "budget_refusal"
    ]
    assert refusals and refusals[0]["epsilon_after"] > tight.dp.budget_epsilon  # type: ignore[operator]
    # whose ε the refusal's is: the population and the accountant its guard priced it with (a
    # Gaussian DP-SGD step has a PRV ε too, so the run's own), in the site's record and the server's
    copies = [
        json.loads(line)["payload"]
        for line in (third / "audit" / "server.jsonl").read_text().splitlines()
        if json.loads(line)["event"] == "budget_refusal"
    ]
    for said in (refusals[0], *copies):
        assert said["population"] == "train" and said["accountant"] == tight.dp.accountant, said
    assert copies, "the server signed no budget_refusal"

    # Deleting the ledger: refused without --yes, then signed and logged, and the file is gone.
    config = tmp_path / "site0.toml"
    config.write_text(
        f'out = "{cfg.out}"\n[model]\ncache_dir = "{cfg.model.cache_dir}"\n'
        "[data]\nmax_visits = 3\nval_fraction = 0.25\ntest_fraction = 0.25\n"
        "[data.synth]\nsites = 3\npatients = 16\nvisits = 3\n"
    )
    store = site_ledger_of(cfg, "site0")
    assert store.path.exists() and list(store.runs) == ["run-1", "run-2", "run-3"]
    runner = CliRunner()
    shown = runner.invoke(app, ["ledger", "show", "--site", "site0", "--config", str(config)])
    assert shown.exit_code == 0 and "run-2" in shown.output, shown.output
    base = ["ledger", "reset", "--site", "site0", "--config", str(config), "--keys", str(keys)]
    refused = runner.invoke(app, [*base, "--reason", "test"])
    assert refused.exit_code == 2 and "--yes" in refused.output and store.path.exists()
    done = runner.invoke(app, [*base, "--reason", "new cohort", "--yes"])
    assert done.exit_code == 0, done.output
    assert not store.path.exists()
    (record_log,) = (store.path.parent / "operations").glob("ledger-reset-site0-*.jsonl")
    assert verify_logs([record_log], keyring).ok
    (record,) = [json.loads(line) for line in record_log.read_text().splitlines()[:1]]
    assert record["event"] == "ledger_reset" and record["payload"]["runs"] == ["run-1", "run-2", "run-3"]
    assert record["payload"]["reason"] == "new cohort"
