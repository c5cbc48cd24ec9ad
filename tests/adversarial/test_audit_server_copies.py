"""A server that tampers with the sites' signed records it keeps in its own log.

The server holds its own signing key, so it can rewrite its log into a chain that verifies on its
own; it cannot forge a site's signature. What it can do is leave a site's record out, or put a
different genuine record of that site in its place. `audit verify` must see both by holding the
server's log against the sites' own logs and against the server's own participant lists.

The records left out are site-0's last ones (round 3): leaving out an earlier one already shows on
the server's log alone, because every later ε then no longer matches what is left to re-derive it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from secure_fed.audits.keys import load_public_keys
from secure_fed.verifier.verify import Verification, verify_logs
from tests.verifier.conftest import Run, build_run, copy_run
from tests.verifier.tamper import read_records, remove_records, reseal_from, subject, write_records


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return build_run(tmp_path_factory.mktemp("honest_run"))


@pytest.fixture
def run(honest: Run, tmp_path: Path) -> Run:
    return copy_run(honest, tmp_path / "run")


def _verify(run: Run, *parties: str) -> Verification:
    paths = [run.paths[party] for party in parties] if parties else run.all_paths
    return verify_logs(paths, load_public_keys(run.keys_dir))


def _privacy(site: str, round_: int, mechanism: str | None = None):
    def chosen(record: dict[str, Any]) -> bool:
        return (
            record["event"] == "privacy"
            and record["party"] == site
            and record["round"] == round_
            and (mechanism is None or record["payload"]["mechanism"] == mechanism)
        )

    return chosen


def _secagg_line(run: Run, round_: int) -> int:
    records = read_records(run.paths["server"])
    return next(i for i, r in enumerate(records, 1) if r["event"] == "secagg_round" and r["round"] == round_)


def test_honest_logs_verify(honest: Run) -> None:
    result = _verify(honest)
    assert result.ok and result.warnings == [], [str(p) for p in result.problems]


def test_server_drops_a_copy_that_the_site_log_still_has(run: Run) -> None:
    (dropped,) = remove_records(run.paths["server"], run.keys["server"], _privacy("site-0", 3, "dp_sgd"))
    seq = dropped["payload"]["seq"]
    assert _verify(run, "server").ok  # on its own the re-signed server log is a clean chain
    problems = [str(p) for p in _verify(run).problems]
    assert problems == [
        f"{run.paths['server']}:{_secagg_line(run, 3)}: site-0 record seq {seq} (privacy, round 3) is "
        f"in {run.paths['site-0']} but missing here, although this log lists site-0 as a participant "
        "of round 3 (copy dropped)"
    ]


def test_server_drops_every_copy_of_a_round_and_the_site_log_is_not_supplied(run: Run) -> None:
    assert len(remove_records(run.paths["server"], run.keys["server"], _privacy("site-0", 3))) == 2
    result = _verify(run, "server", "site-1")
    assert [str(p) for p in result.problems] == [
        f"{run.paths['server']}:{_secagg_line(run, 3)}: round 3: site-0 took part, but no log holds a "
        "privacy record of site-0 for round 3 (DP is on in the run_config)"
    ]
    assert result.warnings == [
        "site-0: log not supplied; its records were checked only as copied by the server"
    ]


def test_server_replays_an_older_copy_in_place_of_a_newer_one(run: Run) -> None:
    path = run.paths["server"]
    records = read_records(path)
    old = next(i for i, r in enumerate(records) if _privacy("site-0", 1, "dp_sgd")(subject(r)))
    new = next(i for i, r in enumerate(records) if _privacy("site-0", 3, "dp_sgd")(subject(r)))
    replaced = records[new]["payload"]["seq"]
    # A genuine, site-signed record, just the wrong one: round 1's release shown again for round 3.
    records[new] = {**records[new], "payload": records[old]["payload"]}
    write_records(path, reseal_from(records, new, run.keys["server"]))
    problems = [str(p) for p in _verify(run).problems]
    inner = records[old]["payload"]["seq"]
    assert f"{path}:{new + 1}: embedded site-0 record seq {inner}: copied after seq" in problems[0]
    assert any(
        f"site-0 record seq {replaced} (privacy, round 3) is in" in p and "(copy dropped)" in p
        for p in problems
    ), problems


def test_server_hides_a_site_from_a_round_it_took_part_in(run: Run) -> None:
    # Copies gone and site-0 struck from round 3's participants: the server's log alone is
    # consistent, but site-0's own log still shows the release, and verify says so.
    gone = remove_records(run.paths["server"], run.keys["server"], _privacy("site-0", 3))
    path = run.paths["server"]
    records = read_records(path)
    index = _secagg_line(run, 3) - 1
    payload = records[index]["payload"]
    records[index]["payload"] = {
        **payload,
        "participants": [s for s in payload["participants"] if s != "site-0"],
    }
    write_records(path, reseal_from(records, index, run.keys["server"]))
    result = _verify(run)
    seqs = sorted(record["payload"]["seq"] for record in gone)
    assert [w for w in result.warnings if "no copy" in w] == [
        f"site-0 record seq {seq} (privacy, round 3) has no copy in {path}: only site-0's own log "
        "shows this release"
        for seq in seqs
    ]
