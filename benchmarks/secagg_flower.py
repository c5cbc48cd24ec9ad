"""SecAgg+ against plain rounds inside Flower's simulation runtime, ours and Flower's own; prints JSON.

`benchmarks/secagg.py` measures the protocol in one process; this script measures it where it runs:
ServerApp and ClientApps in Flower's simulation engine (Ray actors on 127.0.0.1, every message
through Flower's Grid), for

- ours: `secure_fed.crypto.vectors.sum_vectors` over `GridTransport`, with and without SecAgg+
  (the settings `secure-fed run --secagg` uses), each site summing a fixed float32 vector; a
  "round" is the server's broadcast of a global vector of the same size (as FedTAR's train message
  carries the adapters; with SecAgg+ it also carries the setup, and the reply the site's public
  keys; plain, the reply carries the site's vector: one message phase, as in FedTAR's rounds)
  followed by the sum, and "sum" what follows the broadcast (plain: the server adding the carried
  vectors); and a **floor** round: SecAgg+'s message phases, each carrying what SecAgg+'s does
  where it is large (the broadcast's global vector, each site's masked ring vector) and an
  acknowledgement elsewhere, with only the arithmetic every SecAgg+ implementation with these
  parameters must do (`_secagg_floor`: each site's quantisation and 1 + k masks, the server's
  removal of n self masks). No keys, signatures, shares or checks: what the engine's message
  round trips, the transport and the masks cost at minimum. Each phase's wall time is kept; and a
  **pipelined floor** round: the same arithmetic in two message phases, the masked vector on the
  broadcast's reply and then the unmask phase (with the survivor check between them where the
  settings run one). It is the floor of an option we do not run: SecAgg+ in steady state if each
  round's keys and shares rode on the previous round's masked and unmask messages, as Bell et
  al.'s rounds allow in order (keys, then shares, then masked inputs, then unmasking), one round
  ahead;
- Flower's: `DefaultWorkflow` with its default fit workflow against `SecAggPlusWorkflow`
  (`secaggplus_mod` on the clients; Flower's defaults: complete graph, clip 8, 2^22 levels, 2^32
  modulus), a legacy FedAvg whose clients return the same fixed vector; a round is FitIns (the
  global parameters) out, FitRes back.

Plain, SecAgg+ (and, ours, the two floors') rounds alternate inside one simulation per implementation and
site count, after one discarded warm-up set. Client actors get one CPU each (two run at a time on
this machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import _identities  # noqa: E402  (benchmarks/ is on sys.path when run as a script)
import _process_cache
import _secagg_floor
import cloudpickle
import numpy as np
from _identities import bench_identity  # noqa: E402
from _process_cache import once_per_process
from _secagg_floor import server_floor, site_floor

import secure_fed  # noqa: F401  (hardened environment: telemetry off, Ray on loopback)
from secure_fed.config import SecAggConfig
from secure_fed.crypto.quantize import ring_dtype
from secure_fed.crypto.secagg_protocol import (
    CONSISTENCY,
    MASKED,
    PLAIN_SUM,
    SECAGG_PHASES,
    SETUP,
    SHARES,
    UNMASK,
    SecAggSettings,
    embed_setup,
    embedded_setup,
    round_params,
)
from secure_fed.crypto.secagg_server import Advertised, advertised_keys, plan_setup
from secure_fed.crypto.vectors import (
    client_step,
    embed_plain_sum,
    embedded_plain_sum,
    plain_sum_request,
    sum_vectors,
)
from secure_fed.launch.runner import loopback_ray_backend, without_ray_dashboard
from secure_fed.launch.server_app import wait_for_nodes
from secure_fed.protocol.wire import from_records, load_state, store_state, to_records
from secure_fed.server.transports import GridTransport

# Ray workers do not have benchmarks/ on their path: ship the helpers with the pickled ClientApp
cloudpickle.register_pickle_by_value(_identities)
cloudpickle.register_pickle_by_value(_process_cache)
cloudpickle.register_pickle_by_value(_secagg_floor)


def site_vector(node_id: int, dim: int) -> np.ndarray:
    """The site's update, made once per actor process (not part of any timed round), as a site
    holds its trained update in memory across SecAgg+'s phases. Drawing 1 M normal values costs
    ~16 ms; cached in a module global, which starts empty at every message (`_process_cache`),
    SecAgg+'s four client phases paid it four times where the floor, the plain round and Flower's
    SecAgg+ (whose client_fn runs in one stage) paid it once."""
    return once_per_process(
        "site_vectors",
        (node_id, dim),
        lambda: np.random.default_rng(node_id % 2**32).normal(0, 0.1, dim).astype(np.float32),
    )


# -- ours ------------------------------------------------------------------------------------------

MODES = ("plain", "secagg", "floor", "pipelined")
FLOORS = ("floor", "pipelined")


class PhaseTimedTransport(GridTransport):
    """`GridTransport` that keeps each phase's wall time of the current round in `phase_s`."""

    phase_s: dict[str, float]

    def exchange(self, phase: str, requests: Any) -> dict[int, dict[str, Any]]:
        start = time.perf_counter()
        try:
            return super().exchange(phase, requests)
        finally:
            self.phase_s[phase] = self.phase_s.get(phase, 0.0) + time.perf_counter() - start


def ours_apps(dim: int, sites: int, rounds: int, out: dict[str, Any]) -> tuple[Any, Any]:
    from flwr.app import Message
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp

    client = ClientApp()

    settings = SecAggSettings.from_config(SecAggConfig())
    # the floor round's phases: those SecAgg+ runs after the broadcast at these settings, under names
    # of their own (the survivor-consistency phase runs only under distributed DP)
    checks = (CONSISTENCY,) if settings.checks_survivors else ()
    floor = {phase: f"floor_{phase}" for phase in (SHARES, MASKED, *checks, UNMASK)}

    def floor_reply(phase: str, message: Message, context: Any) -> Message:
        if phase != floor[MASKED]:
            return Message(to_records({"status": "ok"}), reply_to=message)
        params = round_params(sites, dim, settings)
        rng = np.random.default_rng()
        masked = site_floor(site_vector(context.node_id, dim), params, settings, rng)
        return Message(to_records({"status": "ok", "masked": masked}), reply_to=message)

    def respond(phase: str, message: Message, context: Any) -> Message:
        if phase in floor.values():
            return floor_reply(phase, message, context)
        if phase == "train":  # the broadcast: take the global vector, acknowledge (+ SecAgg+ keys)
            request = from_records(message.content)
            plain = embedded_plain_sum(request)
            if plain is not None:  # a plain round: the vector rides on the reply, as our sites send it
                vector, _ = client_step(PLAIN_SUM, plain, {}, site_vector(context.node_id, dim))
                return Message(to_records({"status": "ok", **embed_plain_sum(vector)}), reply_to=message)
            setup = embedded_setup(request)
            if setup is None and request.get("pipelined"):  # the masked vector on the broadcast's reply
                return floor_reply(floor[MASKED], message, context)
            if setup is None:  # the floor round's broadcast: an acknowledgement
                return Message(to_records({"status": "ok"}), reply_to=message)
            keys, state = client_step(
                SETUP, setup, {}, site_vector(context.node_id, dim), identity=bench_identity(context.node_id)
            )
            store_state(context.state, "sum", state)
            return Message(to_records({"status": "ok", **embed_setup(keys)}), reply_to=message)
        state = load_state(context.state, "sum")
        reply, state = client_step(
            phase,
            from_records(message.content),
            state,
            site_vector(context.node_id, dim),
            identity=bench_identity(context.node_id),
        )
        store_state(context.state, "sum", state)
        return Message(to_records(reply), reply_to=message)

    client.train()(lambda m, c: respond("train", m, c))
    for phase in (PLAIN_SUM, *SECAGG_PHASES, *floor.values()):
        client.query(phase)(lambda m, c, phase=phase: respond(phase, m, c))

    server = ServerApp()

    @server.main()
    def main(grid: Any, context: Any) -> None:
        nodes = wait_for_nodes(grid, sites, sites)
        transport = PhaseTimedTransport(grid)
        global_vector = np.zeros(dim, dtype=np.float32)
        times: dict[str, list[float]] = {f"{m}_{k}": [] for m in MODES for k in ("sum", "round")}
        for r in range(rounds + 1):
            for mode in MODES:
                transport.phase_s = {}
                start = time.perf_counter()
                sent = (floor_round if mode in FLOORS else our_round)(
                    transport, nodes, global_vector, mode, r
                )
                done = time.perf_counter()
                if r:  # round 0 warms up imports, actors and caches
                    times[f"{mode}_sum"].append(done - sent)
                    times[f"{mode}_round"].append(done - start)
                    for phase, seconds in transport.phase_s.items():
                        times.setdefault(f"{mode}_phase_{phase}", []).append(seconds)
        out.update(times)

    def our_round(transport: GridTransport, nodes: list[int], global_vector: Any, mode: str, r: int) -> float:
        """A broadcast and the sum, as FedTAR's rounds make them; returns when the broadcast ended."""
        agg = settings if mode == "secagg" else None
        round_id = f"{mode}-{r}"
        # as FedTAR's rounds do: the SecAgg+ setup rides on the broadcast
        plan = plan_setup(nodes, dim, agg, round_id) if agg else None
        # and a plain round's vectors ride on the training replies (one message phase)
        ask = embed_plain_sum(plain_sum_request(round_id, dim))
        setups = {u: embed_setup(plan.requests[u]) if plan else ask for u in nodes}
        requests = {u: {"global": global_vector, **setups[u]} for u in nodes}
        replies = transport.exchange("train", requests)
        sent = time.perf_counter()
        advertised, carried = None, None
        if plan is not None:
            answers = {u: embedded_setup(reply) or {} for u, reply in replies.items()}
            advertised = Advertised(plan, advertised_keys(plan, answers))
        else:
            carried = {u: embedded_plain_sum(reply) or {} for u, reply in replies.items()}
        result = sum_vectors(
            transport, nodes, dim, agg, round_id=round_id, advertised=advertised, carried=carried
        )
        if result.survivors != nodes:
            raise RuntimeError(f"{mode} round {r} lost sites: {result.dropped}")
        return sent

    def floor_round(
        transport: GridTransport, nodes: list[int], global_vector: Any, mode: str, r: int
    ) -> float:
        """SecAgg+'s phases with the floor's arithmetic only; `mode` "pipelined": the masked vectors
        on the broadcast's replies (the module docstring)."""
        pipelined = mode == "pipelined"
        broadcast = {"global": global_vector, **({"pipelined": True} if pipelined else {})}
        masked_on = "train" if pipelined else floor[MASKED]
        after = [p for p in floor.values() if not pipelined or p not in (floor[SHARES], floor[MASKED])]
        params = round_params(len(nodes), dim, settings)
        total = np.zeros(dim + 1, dtype=ring_dtype(params.modulus_bits))
        sent = 0.0
        for phase in ("train", *after):
            request = broadcast if phase == "train" else {"round_id": f"{mode}-{r}"}
            replies = transport.exchange(phase, {u: request for u in nodes})
            if phase == "train":
                sent = time.perf_counter()
            if set(replies) != set(nodes) or any("status" not in reply for reply in replies.values()):
                raise RuntimeError(f"{mode} round {r} lost sites in {phase}")
            if phase == masked_on:
                for reply in replies.values():
                    np.add(total, reply["masked"], out=total)
        server_floor(total, len(nodes), np.random.default_rng())
        return sent

    return server, client


# -- Flower's --------------------------------------------------------------------------------------


def flower_apps(dim: int, sites: int, rounds: int, out: dict[str, Any]) -> tuple[Any, Any]:
    from flwr.client import NumPyClient
    from flwr.client.mod import secaggplus_mod
    from flwr.client.mod.secure_aggregation.secaggplus_mod import RECORD_KEY_CONFIGS
    from flwr.clientapp import ClientApp
    from flwr.common import ndarrays_to_parameters
    from flwr.server import LegacyContext, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
    from flwr.server.workflow.default_workflows import default_fit_workflow
    from flwr.serverapp import ServerApp

    class Site(NumPyClient):
        def __init__(self, vector: np.ndarray) -> None:
            self.vector = vector

        def fit(self, parameters: list[np.ndarray], config: dict) -> tuple[list[np.ndarray], int, dict]:
            return [self.vector], 1, {}

    def client_fn(context: Any) -> Any:
        return Site(site_vector(context.node_id, dim)).to_client()

    def secagg_when_asked(message: Any, context: Any, call_next: Callable) -> Any:
        # one ClientApp for both workflows: the mod only for messages that carry SecAgg+ configs
        if RECORD_KEY_CONFIGS in message.content.config_records:
            return secaggplus_mod(message, context, call_next)
        return call_next(message, context)

    client = ClientApp(client_fn=client_fn, mods=[secagg_when_asked])
    server = ServerApp()

    @server.main()
    def main(grid: Any, context: Any) -> None:
        wait_for_nodes(grid, sites, sites)
        times: dict[str, list[float]] = {"plain_round": [], "secagg_round": []}
        for r in range(rounds + 1):
            for mode, fit in (
                ("plain", default_fit_workflow),
                ("secagg", SecAggPlusWorkflow(num_shares=1.0, reconstruction_threshold=0.6)),
            ):

                def timed_fit(
                    grid: Any, legacy: Any, fit: Callable = fit, mode: str = mode, r: int = r
                ) -> None:
                    start = time.perf_counter()
                    fit(grid, legacy)
                    if r:
                        times[f"{mode}_round"].append(time.perf_counter() - start)

                strategy = FedAvg(
                    fraction_fit=1.0,
                    fraction_evaluate=0.0,
                    min_fit_clients=sites,
                    min_available_clients=sites,
                    initial_parameters=ndarrays_to_parameters([np.zeros(dim, dtype=np.float32)]),
                )
                legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=1), strategy=strategy)
                DefaultWorkflow(fit_workflow=timed_fit, evaluate_workflow=lambda g, c: None)(grid, legacy)
        out.update(times)

    return server, client


def simulate(make: Callable, dim: int, sites: int, rounds: int) -> dict[str, Any]:
    from flwr.simulation import run_simulation

    out: dict[str, Any] = {}
    server, client = make(dim, sites, rounds, out)
    start = time.perf_counter()
    with without_ray_dashboard():
        run_simulation(
            server_app=server, client_app=client, num_supernodes=sites, backend_config=loopback_ray_backend(1)
        )
    if not out:
        raise RuntimeError("the simulation ended without timings; see the log above")
    summary: dict[str, Any] = {
        "dim": dim,
        "sites": sites,
        "rounds": rounds,
        "wall_s": time.perf_counter() - start,
    }
    for key, values in out.items():
        summary[f"{key}_s_median"] = statistics.median(values)
        summary[f"{key}_s_all"] = values
    for kind in ("round", "sum"):
        if f"plain_{kind}" in out:
            summary[f"{kind}_ratio"] = statistics.median(out[f"secagg_{kind}"]) / statistics.median(
                out[f"plain_{kind}"]
            )
    if "floor_round" in out:  # the floors against the plain round, and SecAgg+ against the floor
        floor = statistics.median(out["floor_round"])
        plain = statistics.median(out["plain_round"])
        summary["floor_over_plain"] = floor / plain
        summary["pipelined_over_plain"] = statistics.median(out["pipelined_round"]) / plain
        summary["secagg_over_floor"] = statistics.median(out["secagg_round"]) / floor
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dim", type=int, default=1_000_000)
    parser.add_argument("--sites", type=int, nargs="+", default=[5])
    parser.add_argument(
        "--rounds", type=int, default=5, help="timed plain/SecAgg+ pairs after one warm-up pair"
    )
    parser.add_argument("--which", nargs="+", default=["ours", "flower"], choices=["ours", "flower"])
    parser.add_argument(
        "--quick", action="store_true", help="10 k values, 3 sites, 1 timed round (smoke run)"
    )
    args = parser.parse_args()
    if args.quick:
        args.dim, args.sites, args.rounds = 10_000, [3], 1
    makers = {"ours": ours_apps, "flower": flower_apps}
    results = {
        name: [simulate(makers[name], args.dim, sites, args.rounds) for sites in args.sites]
        for name in args.which
    }
    print(json.dumps({"runtime": "flwr simulation (Ray, 127.0.0.1)", "results": results}, indent=2))


if __name__ == "__main__":
    main()
