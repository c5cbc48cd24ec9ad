"""Flower ClientApp: a hospital's node. Every phase goes through `handle` (policy, guard, log).

Which site a node is: `site` in the node config (deployment), else the simulation's partition id.
The site runtime (data, model, GMM, ledger) is cached per process as a speed-up only: Flower's
deployment runtime runs every message in a fresh `flwr-clientapp` process, so whatever one phase
leaves for a later one (the round's upload, the α scalars, SCAFFOLD's control variate, audit records
not yet handed over) and the secure-aggregation protocol state live in `context.state`, which the
SuperNode keeps between messages and never sends to the server.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from secure_fed.config import RunConfig, load_config
from secure_fed.data.sites import site_names
from secure_fed.dp.site_ledger import SiteLedger
from secure_fed.protocol.run_context import config_from_context, run_folder, site_secret_context
from secure_fed.protocol.wire import from_records, load_state, store_state, to_records
from secure_fed.site.guard import Refusal, SiteGuard
from secure_fed.site.handler import handle
from secure_fed.site.lifetime import log_lifetime_end, site_run_config
from secure_fed.site.runtime import SiteRuntime
from secure_fed.site.site import deployment_site_key

log = logging.getLogger(__name__)

PHASES = (
    "hello",
    "finish",
    "hypergrad",
    "evaluate",
    "plain_sum",
    "secagg_setup",
    "secagg_shares",
    "secagg_masked",
    "secagg_consistency",
    "secagg_unmask",
    "plain_scalars",
    "he_keys",
    "he_encrypt",
    "he_decrypt",
)
_STATE_KEY = "secure_fed_protocol"
_MEMORY_KEY = "secure_fed_site"
_STASHED = (
    "upload",
    "upload_fingerprint",
    "secagg_context",
    "secagg_members",
    "upload_round",
    "upload_plan",
    "noise_layers",
    "scalars",
    "scalars_round",
)
_RUNTIMES: dict[tuple[str, str, str], SiteRuntime] = {}
_LIFETIME: dict[tuple[str, str, str], SiteLedger | None] = {}
_SECRETS: dict[str, Any] = {}


_RUN_KEY = "secure_fed_run"  # the method and rounds the run was fixed at (its first message's)


def site_config_from_context(context: Context) -> RunConfig:
    """A deployed site trusts its own policy file, not the server's: with `config-file` in the node
    config, every setting comes from the site's file and only the method and the number of rounds
    from the server — as its `hello` announced them (the server's file may set them), else as the
    submitted run config says."""
    node = dict(context.node_config)
    if "config-file" not in node:
        return config_from_context(context)
    run = dict(context.run_config)
    announced = load_state(context.state, _RUN_KEY)
    overrides = {
        "fed.method": announced.get("method", run.get("method")),
        "fed.rounds": announced.get("rounds", run.get("num-server-rounds")),
    }
    return load_config(Path(str(node["config-file"])), overrides)


def _remember_announcement(
    context: Context, request: dict[str, Any], kept: Callable[[], dict[str, Any]] | None = None
) -> None:
    """The run's first message of any kind fixes the method and rounds for the site: a `hello`'s,
    else the submitted run config's. A `train` that came before any `hello` was planned with the
    run config's round count, so a later `hello` cannot change what the site calibrated its noise
    for (the site's guard refuses one that announces others). `kept`: what the site's guard fixed
    before (a restarted SuperNode has lost `context.state`, not the guard's file)."""
    if load_state(context.state, _RUN_KEY):
        return
    earlier = kept() if kept is not None else {}
    if earlier:
        store_state(context.state, _RUN_KEY, earlier)
        return
    run = dict(context.run_config)
    fixed = {}
    for key, default, kind in (("method", "method", str), ("rounds", "num-server-rounds", int)):
        for value in (request.get(key), run.get(default)):
            if isinstance(value, kind) and not isinstance(value, bool):
                fixed[key] = value
                break
    if fixed:
        store_state(context.state, _RUN_KEY, fixed)


def _fixed_by_guard(context: Context, run_id: str) -> dict[str, Any]:
    """The method and rounds this deployed site's guard fixed for the run ({} where none yet)."""
    node = dict(context.node_config)
    if "config-file" not in node:
        return {}
    policy = load_config(Path(str(node["config-file"])))
    folder = run_folder(policy, run_id) / "sites" / _site_of(policy, context)
    return dict(SiteGuard.load(folder / "guard.json", run_id).run)


def _site_of(cfg: RunConfig, context: Context) -> str:
    node = dict(context.node_config)
    if "site" in node:
        return str(node["site"])
    return site_names(cfg)[int(node["partition-id"])]


def _runtime(cfg: RunConfig, site: str, keys_dir: Path | None, run_id: str, deployed: bool) -> SiteRuntime:
    key = (cfg.model_dump_json(), site, run_id)
    if key not in _RUNTIMES:
        if deployed:
            if not cfg.audit.enabled or keys_dir is None:
                # a hospital's node never acts unlogged: every release must reach its signed log
                raise Refusal(
                    "unlogged",
                    f"site {site} has no audit log to sign: set [audit] enabled = true in its policy and "
                    "start it with --keys (its own signing/<site>.pem and fingerprints.json)",
                )
            # its run folder, and the persistent ledger it joins before anything is released
            runtime = SiteRuntime.create(
                site_run_config(cfg, run_id),
                site,
                site_key=deployment_site_key(cfg, site),
                keys_dir=keys_dir,
                run_id=run_id,
            )
            runtime.deployed = True  # its test split is scored once for the life of its data
        else:  # the simulation of `secure-fed run`: the ledger in [dp] ledger_dir, when set
            runtime = SiteRuntime.create(cfg, site, keys_dir=keys_dir, run_id=run_id)
        _LIFETIME[key] = runtime.lifetime if runtime.privacy is not None else None
        _RUNTIMES[key] = runtime
    return _RUNTIMES[key]


def _restore_memory(runtime: SiteRuntime, context: Context) -> None:
    """Load what earlier messages of this run left behind. Always, not only for a fresh runtime:
    `context.state` is the one copy that is right whichever process ran the previous message."""
    memory = load_state(context.state, _MEMORY_KEY)
    runtime.stash = {key: memory[key] for key in _STASHED if key in memory}
    runtime.learner.restore(memory)  # the learner's own keys (SCAFFOLD's control variate)
    if runtime.trail is not None and "pending" in memory:
        runtime.trail.pending = list(memory["pending"])


def _save_memory(runtime: SiteRuntime, context: Context) -> None:
    memory: dict[str, Any] = {key: runtime.stash[key] for key in _STASHED if key in runtime.stash}
    memory.update(runtime.learner.memory())
    if runtime.trail is not None and runtime.trail.pending:
        memory["pending"] = list(runtime.trail.pending)
    store_state(context.state, _MEMORY_KEY, memory)


def _secret_context(cfg: RunConfig) -> Any:
    if not cfg.he.enabled:
        return None
    key = str(cfg.he.keys_dir)
    if key not in _SECRETS:
        _SECRETS[key] = site_secret_context(cfg)
    return _SECRETS[key]


def make_client_app(
    cfg: RunConfig | None = None, keys_dir: Path | None = None, run_id: str = ""
) -> ClientApp:
    """`cfg` given: the simulation started by `secure-fed run`; None: read it from the run config."""

    def cfg_of(context: Context) -> RunConfig:
        return cfg if cfg is not None else site_config_from_context(context)

    app = ClientApp()  # policy, guard and the instruction log live in `handle`, for every runtime

    def respond(phase: str, message: Message, context: Context) -> Message:
        request = from_records(message.content)
        this_run = run_id or str(context.run_id)
        if cfg is None:
            kept = functools.partial(_fixed_by_guard, context, this_run)
            _remember_announcement(context, request if phase == "hello" else {}, kept)
        run_cfg = cfg_of(context)
        node = dict(context.node_config)
        site_keys = Path(str(node["keys-dir"])) if "keys-dir" in node else keys_dir
        deployed = "config-file" in node  # a hospital's own node, not the simulation's stand-in
        site = _site_of(run_cfg, context)
        runtime = _runtime(run_cfg, site, site_keys, this_run, deployed)
        runtime.node_id = int(context.node_id)  # the SuperNode's, not any id the server's message names
        _restore_memory(runtime, context)
        if phase == "finish":  # the run's and the lifetime ε, before `finish` closes the log
            store = _LIFETIME.get((run_cfg.model_dump_json(), site, this_run))
            log_lifetime_end(runtime.trail, runtime.site, runtime.privacy, store, this_run)
        state = load_state(context.state, _STATE_KEY)
        reply, state = handle(runtime, phase, request, state, _secret_context(run_cfg))
        store_state(context.state, _STATE_KEY, state)
        _save_memory(runtime, context)
        return Message(to_records(reply), reply_to=message)

    @app.train()
    def train(message: Message, context: Context) -> Message:
        return respond("train", message, context)

    for phase in PHASES:
        app.query(phase)(lambda message, context, phase=phase: respond(phase, message, context))
    return app


app = make_client_app()
