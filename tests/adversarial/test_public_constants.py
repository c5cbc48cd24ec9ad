"""What a site releases without noise must not be a function of its exact data: δ, the weight of its
update, and the words of its failures.

A curious server compares what it is sent for a site with n patients and the same site with n + 1
(one patient joined), and reads every signed log for the paths and host names the site's and its
own failures name. The sites are real `SiteRuntime`s; the patient count is the one thing changed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secure_fed.site.site import SiteData
from tests.adversarial.harness import MaliciousServer

# a local file, a Windows user folder and a database host: none matched the old blocklist
# (/home/, /tmp/, /root/, /proc/, IPv4 addresses)
SRV_PATH = "/srv/hospital/data/x.jsonl"
WIN_PATH = r"C:\Users\dr_smith\keys\site1.pem"
HOST = "ris-db01.stmarys.nhs.uk"
SECRETS = ("/srv/hospital", "dr_smith", "ris-db01", "stmarys")


def _sites_with(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """Every site holds `n` training patients as far as its runtime can tell."""
    monkeypatch.setattr(SiteData, "n_train_patients", property(lambda self: n))


def _released_deltas(reply: dict[str, Any]) -> set[tuple[str, float]]:
    """Every δ a training reply hands the server: its summary and each privacy record it copies
    (the training population's and, where released, the validation population's)."""
    records = [json.loads(r) for r in reply["audit_records"]]
    assert any(r["event"] == "privacy" for r in records)  # records that carry δ were sent
    return {("reply", float(reply["delta"]))} | {
        (r["payload"]["population"], float(r["payload"]["delta"])) for r in records if r["event"] == "privacy"
    }


@pytest.mark.slow
def test_delta_does_not_tell_n_from_n_plus_one(make_config, one_torch_thread, monkeypatch) -> None:
    # dp.delta unset: the default used to be 1/(10 n) above 10,000 patients, so 12,000 and 12,001
    # gave the server two different numbers in every privacy record and training reply
    seen: dict[int, set[tuple[str, float]]] = {}
    for n in (12_000, 12_001):
        with monkeypatch.context() as patch:
            _sites_with(patch, n)
            cfg = make_config(
                f"n{n}", dp__enabled=True, dp__target_epsilon=8.0, dp__sample_rate=0.5, fed__method="fedavg"
            )
            server = MaliciousServer(cfg)
            reply = server.victim.send("train", server.honest_train(1))
        assert reply["status"] == "ok", reply
        seen[n] = _released_deltas(reply)
    assert seen[12_000] == seen[12_001]
    # still well below 1/n for the training population: δ ≤ 1/(10 n) at the larger count
    train = {delta for population, delta in seen[12_001] if population == "train"}
    assert train and max(train) <= 1 / (10 * 12_001)


def _upload_weight(server: MaliciousServer) -> float:
    """The weight in the victim's upload (its last value: w·Δ, then w), what leaves the site."""
    return float(server.victim.runtime.stash["upload"][-1])


def test_the_size_weight_does_not_move_with_n(make_config, one_torch_thread, monkeypatch) -> None:
    # 2,047 → 2,048 patients crosses a power of two: the old power-of-two floor doubled the weight
    # (1024 → 2048), a deterministic function of n released without noise
    weights: dict[int, float] = {}
    for n in (2_047, 2_048):
        with monkeypatch.context() as patch:
            _sites_with(patch, n)
            cfg = make_config(
                f"w{n}",
                dp__enabled=True,
                dp__target_epsilon=8.0,
                dp__sample_rate=0.5,
                fed__method="fedavg",
                fed__dp_weights="public_size",
                fed__public_patients={"site0": 2_000, "site1": 1_000, "site2": 500},
                secagg__count_scale=4096.0,  # 2,000 / 4,096 stays within secagg.clip = 1
            )
            server = MaliciousServer(cfg)
            reply = server.victim.send("train", server.honest_train(1))
        assert reply["status"] == "ok", reply
        weights[n] = _upload_weight(server)
    assert weights[2_047] == weights[2_048] == 2_000 / cfg.secagg.count_scale


def _all_records(out: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in sorted(out.rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                yield path, json.loads(line)


def test_failure_text_naming_paths_and_hosts_is_never_signed(
    make_config, one_torch_thread, monkeypatch
) -> None:
    """Round 2: site1 refuses with a reason naming a key file on a Windows host, site2 fails on a
    local file; too few sites train, so the run stops. Then the server's own step fails with an
    exception of ours naming a data file and a host, so the run stops (resumable: the server signs
    its stop, the sites' logs stay open). Each text used to be signed
    verbatim (site1's refusal in the server's `run_stopped` and in every site's `finish`, the
    server's error in `run_aborted` and every site's `finish`, the sites' exceptions in their own
    `instruction` records)."""
    from secure_fed.data.manifest import DataValidationError
    from secure_fed.launch import runner
    from secure_fed.server.orchestrator import MachineryFailed, Orchestrator
    from secure_fed.site.guard import Refusal

    cfg = make_config("leaks", fed__method="fedavg", fed__rounds=2, fed__min_sites=3)
    made = runner.make_site_handler

    def failing(runtime: Any, secret: Any) -> Any:
        trained = runtime.train

        def train(round_id: int, *args: Any, **kwargs: Any) -> dict[str, Any]:
            if round_id == 2 and runtime.site == "site1":
                raise Refusal("no_keys", f"SecAgg+ cannot read {WIN_PATH} on {HOST}")
            if round_id == 2 and runtime.site == "site2":
                raise OSError(f"{SRV_PATH}: unreadable (mounted from {HOST})")
            return trained(round_id, *args, **kwargs)

        runtime.train = train
        return made(runtime, secret)

    def evaluate(self: Orchestrator, *args: Any, **kwargs: Any) -> Any:
        raise DataValidationError([f"{SRV_PATH}:7: not a visit record (exported on {HOST})"])

    monkeypatch.setattr(runner, "make_site_handler", failing)
    monkeypatch.setattr(Orchestrator, "evaluate", evaluate)
    # an error of the server's own code leaves the run resumable (MachineryFailed), its cause kept
    with pytest.raises(MachineryFailed) as raised:
        runner.run_inprocess(cfg, cfg.out)
    assert SRV_PATH in str(raised.value.__cause__)  # the operator's --verbose keeps the words

    records = list(_all_records(cfg.out))
    parties = {path.stem for path, _ in records}
    assert {"server", "site0", "site1", "site2"} <= parties
    for path, record in records:
        text = json.dumps(record)
        assert not any(s in text for s in SECRETS), (path.name, record)

    # what the logs do sign: a code and our fixed text for it
    server = [r for p, r in records if p.stem == "server"]
    stopped = next(r["payload"] for r in server if r["event"] == "run_stopped")
    aborted = next(r["payload"] for r in server if r["event"] == "run_aborted")
    assert stopped["code"] == "too_few_sites" and "fed.min_sites" in stopped["reason"]
    assert aborted["code"] == "data" and "data failed validation" in aborted["reason"]
    for site in ("site0", "site1", "site2"):  # left open for --resume: no stop signed at the sites
        assert not [r for p, r in records if p.stem == site and r["event"] in ("run_aborted", "run_end")]
    refused = [
        r["payload"] for p, r in records if p.stem in ("site1", "site2") and r["event"] == "instruction"
    ]
    assert {(i["phase"], i["round"], i["code"]) for i in refused if i["outcome"] != "acted"} == {
        ("train", 2, "no_keys"),
        ("train", 2, "internal"),
    }

    # the exceptions' words stay in each site's unsigned debug log, in its private folder
    debug1 = (cfg.out / "sites" / "site1" / "debug.log").read_text()
    debug2 = (cfg.out / "sites" / "site2" / "debug.log").read_text()
    assert WIN_PATH in json.loads(debug1.splitlines()[-1])["detail"]
    assert SRV_PATH in json.loads(debug2.splitlines()[-1])["detail"]
