"""A site's lifetime budget against a server that simply starts new runs, and against the data
and folder changes of ordinary operation.

Each test drives a deployed node's real runtime (`launch/client_app.py` builds it per run id, as a
SuperNode does for every `flwr run`) on one site's data, with its persistent ledger. Attacks:
every new run used to release (and charge, without asking the budget) a fresh noisy GMM histogram;
the ledger was found by a hash of the exact records, so a refreshed data set met an empty one; and
a changed `dp.ledger_dir` quietly started from ε = 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from secure_fed.config import RunConfig
from secure_fed.crypto.keys import init_keys
from secure_fed.dp.ledger import LedgerError
from secure_fed.launch import client_app
from secure_fed.site.guard import Refusal
from secure_fed.site.lifetime import reset_site_ledger, site_ledger_of
from secure_fed.site.runtime import SiteRuntime

SITE = "site0"


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    folder = tmp_path / "keys"
    init_keys(folder, ["server", "site0", "site1", "site2"])
    return folder


def policy(make_config, keys: Path, **extra: object) -> RunConfig:
    return make_config(
        "site-out",
        dp__enabled=True,
        dp__noise_multiplier=2.0,
        dp__target_epsilon=8.0,
        dp__sample_rate=0.5,
        fed__method="fedavg",
        audit__keys_dir=str(keys),
        **extra,
    )


def node_runtime(cfg: RunConfig, keys: Path, run_id: str) -> SiteRuntime:
    """What a deployed node builds for a run the server started (launch/client_app.py)."""
    return client_app._runtime(cfg, SITE, keys, run_id, deployed=True)


def gmm_charges(cfg: RunConfig) -> int:
    store = site_ledger_of(cfg, SITE)
    return sum(e.mechanism == "gmm_histogram" for entries in store.runs.values() for e in entries)


def test_new_runs_release_no_fresh_gmm_histogram(make_config, keys: Path, one_torch_thread) -> None:
    cfg = policy(make_config, keys, dp__budget_epsilon=50.0)
    first = node_runtime(cfg, keys, "run-1")
    assert first.privacy is not None
    spent = site_ledger_of(cfg, SITE).epsilon(first.privacy.delta)["train"]["rdp"]
    for run in ("run-2", "run-3", "run-4"):
        node_runtime(cfg, keys, run)
    # one histogram was released for these patients; later runs refit from it (post-processing)
    assert gmm_charges(cfg) == 1
    assert site_ledger_of(cfg, SITE).epsilon(first.privacy.delta)["train"]["rdp"] == pytest.approx(spent)


def test_a_gmm_release_the_budget_cannot_afford_is_refused(make_config, keys: Path, one_torch_thread) -> None:
    cfg = policy(make_config, keys, dp__budget_epsilon=0.05)  # below one histogram's ε
    with pytest.raises(Refusal, match="budget"):
        node_runtime(cfg, keys, "run-1")
    assert gmm_charges(cfg) == 0
    assert not list((Path(cfg.out)).rglob("gmm-histogram*.json"))  # nothing was released


def test_epsilon_follows_the_patients_across_a_data_refresh(
    make_config, keys: Path, one_torch_thread
) -> None:
    cfg = policy(make_config, keys)
    runtime = node_runtime(cfg, keys, "run-1")
    assert runtime.privacy is not None
    spent = site_ledger_of(cfg, SITE).epsilon(runtime.privacy.delta)
    # the same site one visit and one patient later: a new digest of its records, the same patients
    refreshed = cfg.model_copy(
        update={
            "data": cfg.data.model_copy(update={"synth": cfg.data.synth.model_copy(update={"patients": 17})})
        }
    )
    runtime = node_runtime(refreshed, keys, "run-2")
    store = site_ledger_of(refreshed, SITE)
    assert "run-1" in store.runs  # the earlier run's charges are still this site's
    assert runtime.privacy is not None
    carried = runtime.privacy.ledger.prior_events(SITE, "train")
    assert carried and store.epsilon(runtime.privacy.delta)["train"]["rdp"] >= spent["train"]["rdp"]


def test_a_moved_ledger_folder_is_refused_until_a_logged_reset(
    make_config, keys: Path, tmp_path: Path, one_torch_thread
) -> None:
    cfg = policy(make_config, keys, dp__ledger_dir=str(tmp_path / "ledgers-a"))
    node_runtime(cfg, keys, "run-1")
    assert site_ledger_of(cfg, SITE).path.exists()
    moved = cfg.model_copy(update={"dp": cfg.dp.model_copy(update={"ledger_dir": tmp_path / "ledgers-b"})})
    with pytest.raises(LedgerError, match="ledgers-a"):
        node_runtime(moved, keys, "run-2")
    assert not site_ledger_of(moved, SITE).path.exists()
    # the operator's logged decision: the old ledger is reset, then the new folder may start
    reset_site_ledger(cfg, SITE, keys, "moved to new storage")
    node_runtime(moved, keys, "run-3")
    assert site_ledger_of(moved, SITE).path.exists()


def test_a_deleted_ledger_without_a_logged_reset_is_refused(
    make_config, keys: Path, one_torch_thread
) -> None:
    cfg = policy(make_config, keys)
    node_runtime(cfg, keys, "run-1")
    site_ledger_of(cfg, SITE).path.unlink()  # not `secure-fed ledger reset`: no record says why
    with pytest.raises(LedgerError, match="reset"):
        node_runtime(cfg, keys, "run-2")
