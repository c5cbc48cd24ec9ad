"""Attacks on what a DP site releases outside DP-SGD: α scalars, evaluation, finish, error text.

Each test is a server sending what our orchestrator never sends; the site must refuse (and log the
refusal) or be charged for what it releases.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.adversarial.harness import MaliciousServer


def _admit(server: MaliciousServer, round_id: int = 1) -> None:
    reply = server.victim.send("train", server.honest_train(round_id))
    assert reply["status"] == "ok", reply


def test_alpha_scalars_only_for_an_admitted_round(server: MaliciousServer) -> None:
    # The averaging attack: 200 fresh α releases for made-up rounds cut the noise ~14x, uncharged.
    final, directions = server.directions()
    released = 0
    for round_id in range(1000, 1010):
        reply = server.victim.send("hypergrad", {"round": round_id, "final": final, "directions": directions})
        released += reply.get("status") == "ok"
    assert released == 0
    refused = [r for r in server.victim.events("instruction") if r["payload"]["phase"] == "hypergrad"]
    assert len(refused) == 10 and all(r["payload"]["outcome"] == "refused" for r in refused)


def test_alpha_scalars_once_per_round(server: MaliciousServer) -> None:
    _admit(server)
    final, directions = server.directions()
    first = server.victim.send("hypergrad", {"round": 1, "final": final, "directions": directions})
    assert first["status"] == "ok"
    # A second request for the same round with other directions would be a second, uncharged release.
    other_final, other = server.directions(seed=1)
    second = server.victim.send("hypergrad", {"round": 1, "final": other_final, "directions": other})
    assert second["status"] == "refused" and second["code"] == "alpha_already_released"
    # The very same request again (a retry after a lost reply) gets the same values back, no new noise.
    scalars = server.victim.runtime.stash["scalars"].copy()
    retry = server.victim.send("hypergrad", {"round": 1, "final": final, "directions": directions})
    assert retry["status"] == "ok"
    np.testing.assert_array_equal(server.victim.runtime.stash["scalars"], scalars)


def test_alpha_directions_are_bounded(server: MaliciousServer) -> None:
    _admit(server)
    final, directions = server.directions()
    bad = {
        "wrong number of directions": directions[:1],
        "wrong length": directions[:, :-1],
        "not finite": np.where(np.arange(directions.size).reshape(directions.shape) == 3, np.nan, directions),
        "huge": directions * 1e9,
    }
    for why, value in bad.items():
        reply = server.victim.send("hypergrad", {"round": 1, "final": final, "directions": value})
        assert reply["status"] == "refused", why
        assert reply["code"] == "bad_directions", why
    assert (
        server.victim.send("hypergrad", {"round": 1, "final": final, "directions": directions})["status"]
        == "ok"
    )


def test_validation_split_is_never_scored_for_the_server(server: MaliciousServer) -> None:
    reply = server.victim.send("evaluate", {"global": server.global_state, "split": "val"})
    assert reply["status"] == "refused" and "BLEU-4" not in reply


@pytest.mark.slow  # rounds of three sites in process: make test-fast leaves it out
def test_test_split_is_scored_once_after_the_last_round(server: MaliciousServer) -> None:
    request = {"global": server.global_state, "split": "test"}
    early = server.victim.send("evaluate", request)
    assert early["status"] == "refused" and early["code"] == "evaluate_before_last_round"
    for round_id in (1, 2):
        _admit(server, round_id)
    first = server.victim.send("evaluate", request)
    assert first["status"] == "ok" and "BLEU-4" in first
    # Scoring the same split for a second (server-chosen) model would be a free oracle on test data.
    second = server.victim.send("evaluate", {**request, "global": server.global_state + 1e-3})
    assert second["status"] == "refused" and second["code"] == "evaluate_repeated"


@pytest.mark.slow  # rounds of three sites in process: make test-fast leaves it out
def test_exact_population_sizes_stay_on_the_site(server: MaliciousServer) -> None:
    for round_id in (1, 2):
        reply = server.victim.send("train", server.honest_train(round_id))
        copied = [json.loads(r) for r in reply["audit_records"]]
        for record in copied:
            assert "population_size" not in record["payload"], record["payload"]
            assert isinstance(record["payload"]["population_bucket"], str)
    scores = server.victim.send("evaluate", {"global": server.global_state, "split": "test"})
    n_test = len(server.victim.runtime.learner.data.test)
    assert "n" not in scores and scores["weight"] <= n_test < 2 * scores["weight"]
    # The site's own log keeps the exact figures for its auditors.
    sizes = server.victim.events("population_sizes")
    assert sizes and sizes[0]["payload"]["train"] == server.victim.runtime.learner.data.n_train_patients


def test_finish_before_the_last_round_is_refused_and_logged(server: MaliciousServer) -> None:
    _admit(server, 1)
    reply = server.victim.send("finish", {})
    assert reply["status"] == "refused" and reply["code"] == "finish_before_last_round"
    # The log stays open: round 2 is still charged and logged.
    _admit(server, 2)
    assert [r["round"] for r in server.victim.events("privacy") if r["payload"]["mechanism"] == "dp_sgd"] == [
        1,
        2,
    ]
    assert server.victim.send("finish", {})["status"] == "ok"
    assert server.victim.log()[-1]["event"] == "head"


def test_a_site_that_stopped_early_acts_on_nothing_more(server: MaliciousServer) -> None:
    _admit(server, 1)
    assert server.victim.send("finish", {"stopped_early": "too few sites"})["status"] == "ok"
    after = server.victim.send("train", server.honest_train(2))
    assert after["status"] == "refused" and after["code"] == "run_finished"


def test_errors_carry_a_code_not_local_details(server: MaliciousServer, monkeypatch) -> None:
    request = server.honest_train(1)
    request["global"] = request["global"][:-5]  # wrong length: training cannot start
    reply = server.victim.send("train", request)
    assert reply["status"] == "refused" and reply["code"] == "bad_request"
    # A failure deep in the site (its text names a local file and a study) reaches the server as a code.
    secret = f"{server.victim.runtime.folder}/studies/patient-0042.png"

    def broken(*args: object) -> None:
        raise OSError(f"{secret}: unreadable")

    monkeypatch.setattr(server.victim.runtime, "train", broken)
    reply = server.victim.send("train", server.honest_train(1))
    assert reply["status"] == "error" and reply["code"] == "internal"
    text = json.dumps(reply, default=str)
    assert "patient-0042" not in text and str(server.victim.runtime.cfg.out) not in text
    # The site's signed log keeps the codes; the details stay in its unsigned debug log only.
    logged = [r["payload"] for r in server.victim.events("instruction") if r["payload"]["outcome"] != "acted"]
    assert [p["code"] for p in logged] == ["bad_request", "internal"]
    assert "patient-0042" not in json.dumps(server.victim.log())
    assert [d["code"] for d in server.victim.debug()] == ["bad_request", "internal"]
    assert "patient-0042" in server.victim.debug()[-1]["detail"]


def test_a_sites_own_fault_is_not_reported_as_the_servers_malformed_request(
    server: MaliciousServer, monkeypatch
) -> None:
    """The site's own privacy accounting failing (here its budget guard refusing the site's budget,
    as an unbounded one was) is the site's fault: the server must not read it as its own bad request."""
    from secure_fed.dp.budget import BudgetGuard

    privacy = server.victim.runtime.privacy
    assert privacy is not None

    def unusable(*args: object, **kwargs: object) -> BudgetGuard:
        return BudgetGuard(privacy.ledger, float("inf"))

    monkeypatch.setattr("secure_fed.site.private.BudgetGuard", unusable)
    reply = server.victim.send("train", server.honest_train(1))
    assert reply["status"] == "error" and reply["code"] == "site_fault", reply
    assert "malformed" not in reply["error"] and "could not complete 'train'" in reply["error"]
    logged = [r["payload"] for r in server.victim.events("instruction") if r["payload"]["outcome"] != "acted"]
    assert logged[-1]["code"] == "site_fault" and "detail" not in logged[-1]
    # the words stay in the site's unsigned debug log
    assert "positive and finite" in server.victim.debug()[-1]["detail"]


def test_every_instruction_is_logged_with_a_digest(server: MaliciousServer) -> None:
    _admit(server, 1)
    server.victim.send("plain_sum", {"round": 1})  # policy requires SecAgg+: refused
    instructions = [r["payload"] for r in server.victim.events("instruction")]
    assert [(i["phase"], i["outcome"]) for i in instructions] == [
        ("train", "acted"),
        ("plain_sum", "refused"),
    ]
    assert all(len(i["digest"]) == 64 for i in instructions)
    assert instructions[1]["code"] == "policy"


def test_with_secagg_per_site_losses_and_counts_stay_on_the_site(make_config, one_torch_thread) -> None:
    # Without DP but with SecAgg+, a per-site loss or validation count would be one site's figure in
    # the clear next to a sum that is meant to hide it.
    server = MaliciousServer(make_config(secagg__enabled=True, fed__method="fedtar"))
    reply = server.victim.send("train", server.honest_train(1))
    assert reply["status"] == "ok" and np.isnan(reply["train_loss"])
    final, directions = server.directions()
    scalars = server.victim.send("hypergrad", {"round": 1, "final": final, "directions": directions})
    assert scalars == {"status": "ok"}


def test_a_deployed_sites_patient_id_key_is_its_own_secret(make_config, one_torch_thread) -> None:
    # The simulation's stand-in key follows from the seed and the site's name: with it, a hashed
    # patient id is a dictionary lookup away from the record number.
    from secure_fed.launch import client_app as app
    from secure_fed.protocol.keyring import audit_keys_dir
    from secure_fed.site.site import simulation_site_key

    cfg = make_config(fed__method="fedtar")
    runtime = app._runtime(cfg, "site0", audit_keys_dir(cfg, ["site0"]), "run", deployed=True)
    key_file = cfg.out / "sites" / "site0" / "patient-id.key"
    assert runtime.learner.data.site_key == key_file.read_bytes() and len(runtime.learner.data.site_key) == 32
    assert runtime.learner.data.site_key != simulation_site_key(cfg.seed, "site0")
    assert key_file.stat().st_mode & 0o077 == 0
    app._RUNTIMES.clear()
