"""train.average: the server releases (evaluates, saves, hashes) an average of its per-round models
while training goes on from the raw one; the checkpoint keeps the average, so a run stopped and
resumed releases exactly what an uninterrupted run does. Averaging charges nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from secure_fed.crypto.secagg_protocol import PLAIN_SUM
from secure_fed.launch.resume_check import ResumeRefused, check_average
from secure_fed.server.averaging import IterateAverage
from secure_fed.server.checkpoint import load_checkpoint
from secure_fed.server.orchestrator import MachineryFailed, Orchestrator, RunAborted

TARGETS = {0: np.array([1.0, -2.0, 0.5]), 1: np.array([3.0, 0.0, -1.0]), 2: np.array([-1.0, 1.0, 2.0])}
ROWS = {0: 2.0, 1: 3.0, 2: 5.0}


class Sites:
    """Three plain-mode sites whose update pulls the model halfway to their own target, and whose
    test score is the first coordinate of the model they are asked to score."""

    def __init__(self, fail_at_round: int | None = None) -> None:
        self.fail_at_round = fail_at_round
        self.round = 0
        self.global_state = np.zeros(3)
        self.scored: list[np.ndarray] = []

    def exchange(self, phase: str, requests: Mapping[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        replies: dict[int, dict[str, Any]] = {}
        for node, request in requests.items():
            if phase == "hello":
                replies[node] = {"site": f"site{node}"}
            elif phase == "train":
                self.round = int(request["round"])
                if self.round == self.fail_at_round:
                    raise ConnectionError("the server's machine went down")
                self.global_state = np.asarray(request["global"])
                replies[node] = {"status": "ok", "train_loss": 1.0}
            elif phase == PLAIN_SUM:
                delta = 0.5 * (TARGETS[node] - self.global_state)
                replies[node] = {"vector": np.concatenate([ROWS[node] * delta, [ROWS[node]]])}
            elif phase == "evaluate":
                self.scored.append(np.asarray(request["global"]))
                replies[node] = {"status": "ok", "weight": 1, "CIDEr": float(request["global"][0])}
            elif phase == "finish":
                replies[node] = {"status": "ok"}
            else:
                raise AssertionError(f"unexpected phase {phase}")
        return replies


def _run(cfg: Any, sites: Sites, resume: bool = False) -> Orchestrator:
    orchestrator = Orchestrator(cfg, sites, [0, 1, 2], np.zeros(3), cfg.out, announce=lambda line: None)
    orchestrator.run(resume=resume)
    return orchestrator


def _iterates(rounds: int) -> list[np.ndarray]:
    """FedAvg's models by hand: each round moves halfway to the row-weighted target."""
    target = sum(ROWS[k] * TARGETS[k] for k in TARGETS) / sum(ROWS.values())
    state, out = np.zeros(3), []
    for _ in range(rounds):
        state = state + 0.5 * (target - state)
        out.append(state)
    return out


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        # bias-corrected EMA at decay 0.5: weights 1, 2, 4, 8 (newest) over 15
        ("ema", lambda w: (w[0] + 2 * w[1] + 4 * w[2] + 8 * w[3]) / 15),
        ("tail", lambda w: (w[2] + w[3]) / 2),  # the last half of 4 rounds
    ],
)
def test_the_released_model_is_the_average_and_training_goes_on_from_the_raw_one(
    make_config, kind: str, expected: Any
) -> None:
    cfg = make_config(
        fed__method="fedavg",
        fed__rounds=4,
        train__average=kind,
        train__ema_decay=0.5,
        train__tail_fraction=0.5,
    )
    sites = Sites()
    orchestrator = _run(cfg, sites)
    iterates = _iterates(4)
    released = expected(iterates)
    np.testing.assert_allclose(
        sites.global_state, iterates[2], atol=1e-12
    )  # round 4 trained from round 3's raw
    np.testing.assert_allclose(orchestrator.final_state, released, atol=1e-12)
    np.testing.assert_allclose(np.load(cfg.out / "global_adapters.npy"), released, atol=1e-12)
    np.testing.assert_allclose(np.load(cfg.out / "last_iterate.npy"), iterates[3], atol=1e-12)
    assert len(sites.scored) == 3 and all(np.array_equal(s, sites.scored[0]) for s in sites.scored)
    np.testing.assert_allclose(sites.scored[0], released, atol=1e-12)  # every site scored the average
    checkpoint = load_checkpoint(cfg.out / "checkpoint")
    assert checkpoint is not None
    np.testing.assert_allclose(checkpoint.global_state, iterates[3], atol=1e-12)
    np.testing.assert_allclose(checkpoint.released, released, atol=1e-12)


@pytest.mark.parametrize("kind", ["ema", "tail"])
def test_a_resumed_run_releases_what_an_uninterrupted_one_does(make_config, kind: str) -> None:
    settings = {
        "fed__method": "fedavg",
        "fed__rounds": 5,
        "train__average": kind,
        "train__tail_fraction": 0.6,
    }
    whole = make_config("whole", **settings)
    _run(whole, Sites())
    cut = make_config("cut", **settings)
    with pytest.raises(MachineryFailed, match="ConnectionError"):  # resumable: logs left open
        _run(cut, Sites(fail_at_round=4))  # rounds 1-3 done and checkpointed, with the average
    saved = load_checkpoint(cut.out / "checkpoint")
    assert saved is not None and saved.round == 3 and saved.average is not None
    _run(cut, Sites(), resume=True)
    for name in ("global_adapters.npy", "last_iterate.npy"):
        np.testing.assert_array_equal(np.load(cut.out / name), np.load(whole.out / name))


def test_a_resume_with_other_averaging_settings_is_refused(make_config) -> None:
    cfg = make_config(fed__method="fedavg", fed__rounds=3, train__average="ema")
    with pytest.raises(MachineryFailed, match="ConnectionError"):  # resumable: logs left open
        _run(cfg, Sites(fail_at_round=2))
    changed = cfg.model_copy(update={"train": cfg.train.model_copy(update={"ema_decay": 0.5})})
    # `secure-fed run --resume` refuses it before anything starts (`check_resume` ends with this
    # check), the logs left open for a resume
    # with the settings the run began with; the server still refuses it if asked
    with pytest.raises(ResumeRefused, match="iterate average was made with"):
        check_average(changed, cfg.out)
    with pytest.raises(RunAborted, match="iterate average was made with"):
        _run(changed, Sites(), resume=True)
    plain = cfg.model_copy(update={"train": cfg.train.model_copy(update={"average": "none"})})
    assert load_checkpoint(cfg.out / "checkpoint") is not None
    _run(plain, Sites(), resume=True)  # a run may always release its last iterate instead
    none_kept = make_config("none", fed__method="fedavg", fed__rounds=3)
    with pytest.raises(MachineryFailed, match="ConnectionError"):  # resumable: logs left open
        _run(none_kept, Sites(fail_at_round=2))
    averaging = none_kept.model_copy(update={"train": none_kept.train.model_copy(update={"average": "tail"})})
    with pytest.raises(ResumeRefused, match="kept no iterate average"):
        check_average(averaging, none_kept.out)
    with pytest.raises(RunAborted, match="kept no iterate average"):
        _run(averaging, Sites(), resume=True)


def test_the_default_releases_the_last_iterate_and_keeps_no_average(make_config) -> None:
    cfg = make_config(fed__method="fedavg", fed__rounds=2)
    assert cfg.train.average == "none" and IterateAverage.from_config(cfg, 2) is None
    orchestrator = _run(cfg, Sites())
    np.testing.assert_allclose(orchestrator.final_state, _iterates(2)[1], atol=1e-12)
    assert not (cfg.out / "last_iterate.npy").exists()
    checkpoint = load_checkpoint(cfg.out / "checkpoint")
    assert checkpoint is not None and checkpoint.average is None


def test_the_tail_starts_where_its_fraction_says_and_ema_is_bias_corrected() -> None:
    assert IterateAverage("tail", 50, tail_fraction=0.2).tail_start == 41
    assert IterateAverage("tail", 5, tail_fraction=0.5).tail_start == 3  # ⌈2.5⌉ = 3 of 5
    assert IterateAverage("tail", 5, tail_fraction=1.0).tail_start == 1
    ema = IterateAverage("ema", 10, decay=0.9)
    ema.update(np.array([2.0]), 1)
    np.testing.assert_allclose(ema.released(np.array([0.0])), [2.0])  # one iterate: itself, not 0.2
    before = IterateAverage("tail", 4, tail_fraction=0.5)
    before.update(np.array([1.0]), 1)
    np.testing.assert_array_equal(before.released(np.array([7.0])), [7.0])  # before the tail: raw
