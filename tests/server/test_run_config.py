"""`[fed] rounds` in the server's file is honoured under `flwr run` (not replaced by the default
`num-server-rounds`), and a deployed site runs the rounds the server announced."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from flwr.app import Context, RecordDict

from secure_fed.launch.client_app import _remember_announcement, site_config_from_context
from secure_fed.protocol.run_context import config_from_context


def _context(run_config: dict, node_config: dict | None = None) -> Context:
    return Context(
        run_id=1, node_id=2, node_config=node_config or {}, state=RecordDict(), run_config=run_config
    )


def test_the_servers_file_wins_and_the_run_config_fills_in(tmp_path: Path, caplog) -> None:
    with_rounds = tmp_path / "server.toml"
    with_rounds.write_text('[fed]\nrounds = 2\nmethod = "fedavg"\n')
    silent = tmp_path / "bare.toml"
    silent.write_text("seed = 1\n")
    defaults = {"method": "fedtar", "num-server-rounds": 3}  # pyproject.toml's [tool.flwr.app.config]
    with caplog.at_level(logging.WARNING):
        cfg = config_from_context(_context({"config-file": str(with_rounds), **defaults}))
    assert (cfg.fed.rounds, cfg.fed.method) == (2, "fedavg")
    # Flower filled in the app's defaults: nothing the operator set, so nothing to warn about
    assert caplog.text == ""
    with caplog.at_level(logging.WARNING):
        config_from_context(_context({"config-file": str(with_rounds), "num-server-rounds": 5}))
    assert "rounds = 2" in caplog.text and "num-server-rounds = 5 is not used" in caplog.text
    bare = config_from_context(_context({"config-file": str(silent), **defaults}))
    assert (bare.fed.rounds, bare.fed.method) == (3, "fedtar")


def test_a_deployed_site_runs_the_rounds_the_server_announced(tmp_path: Path) -> None:
    policy = tmp_path / "site0.toml"
    policy.write_text("[fed]\nrounds = 9\n")  # a site's own number never decides the run's length
    context = _context({"method": "fedtar", "num-server-rounds": 3}, {"config-file": str(policy)})
    assert site_config_from_context(context).fed.rounds == 3  # before hello: the run config
    _remember_announcement(context, {"method": "fedavg", "rounds": 2})
    cfg = site_config_from_context(context)
    assert (cfg.fed.rounds, cfg.fed.method) == (2, "fedavg")
    _remember_announcement(context, {"method": "fedtar", "rounds": 7})  # a later hello changes nothing
    assert site_config_from_context(context).fed.rounds == 2


@pytest.mark.parametrize("bad", [{"rounds": "2"}, {"rounds": True}, {}])
def test_an_announcement_of_the_wrong_type_is_ignored(tmp_path: Path, bad: dict) -> None:
    policy = tmp_path / "site0.toml"
    policy.write_text("seed = 0\n")
    context = _context({"method": "fedtar", "num-server-rounds": 3}, {"config-file": str(policy)})
    _remember_announcement(context, bad)
    assert site_config_from_context(context).fed.rounds == 3


def test_the_app_defaults_are_pyprojects() -> None:
    import tomllib

    from secure_fed.protocol.run_context import APP_DEFAULTS

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    declared = pyproject["tool"]["flwr"]["app"]["config"]
    assert {key: declared[key] for key in APP_DEFAULTS} == APP_DEFAULTS


def test_a_train_before_any_hello_fixes_the_run_configs_round_count(tmp_path: Path) -> None:
    """Issue 62: a `train` before `hello` planned with the run config's rounds; the first `hello`
    after it used to fix another count, and the site's plan changed mid-run."""
    policy = tmp_path / "site0.toml"
    policy.write_text("seed = 0\n")
    context = _context({"method": "fedtar", "num-server-rounds": 20}, {"config-file": str(policy)})
    _remember_announcement(context, {})  # what the ClientApp does with a message other than hello
    _remember_announcement(context, {"method": "fedavg", "rounds": 2})  # the first hello, too late
    cfg = site_config_from_context(context)
    assert (cfg.fed.rounds, cfg.fed.method) == (20, "fedtar")


def test_a_restarted_node_keeps_what_its_guard_fixed(tmp_path: Path) -> None:
    """`context.state` dies with the SuperNode; the site's guard file does not."""
    from secure_fed.launch.client_app import _fixed_by_guard
    from secure_fed.site.guard import SiteGuard

    policy = tmp_path / "site0.toml"
    policy.write_text(f'out = "{tmp_path / "out"}"\n')
    node = {"config-file": str(policy), "site": "site0"}
    context = _context({"method": "fedtar", "num-server-rounds": 3}, node)
    assert _fixed_by_guard(context, "run-7") == {}
    folder = tmp_path / "out" / "runs" / "run-7" / "sites" / "site0"
    folder.mkdir(parents=True)
    SiteGuard(folder / "guard.json", "run-7").fix_run("fedtar", 20)
    assert _fixed_by_guard(context, "run-7") == {"method": "fedtar", "rounds": 20}
    assert _fixed_by_guard(context, "run-8") == {}  # another run's guard fixes nothing here
    _remember_announcement(
        context, {"method": "fedtar", "rounds": 2}, lambda: _fixed_by_guard(context, "run-7")
    )
    assert site_config_from_context(context).fed.rounds == 20
