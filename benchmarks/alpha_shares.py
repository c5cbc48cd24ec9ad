"""Noise in the released α sum under CKKS, each site's own σ_α against shares sized for the verified
participants (issue 64 item 3), over σ_α·C_α; prints JSON.

Five sites, c = 1, the hospital-scale distributed config's α settings (configs/hospital-scale-
distributed.toml: C_α, and σ_α as `SitePrivacy.plan` calibrates it for the run's ε, δ and rounds).
Each round every site clips random per-patient T-vectors and the five sum them under CKKS through
the real protocol (`crypto.scalars.sum_scalars` on the server side, `client_step` keys, encrypt and
decrypt at the sites, signed mask keys, pairwise masks, tags), the sites' values being:

- before: each site's own Gaussian release, `SitePrivacy.release_alpha_scalars` (σ_α·C_α each: the
  sum carries √5 × σ_α·C_α);
- after: `SitePrivacy.alpha_share` behind the protocol's `SizedValues` hook, as a site's handler
  gives it: the clipped sum plus a share of σ_α·C_α/√(m − c) for the m participants verified (the
  sum carries √(5/4) × σ_α·C_α, and any 4 honest shares carry σ_α·C_α).

Measured: std of (decrypted sum − the sites' clipped sums) over all rounds' T values, over σ_α·C_α,
with its standard error; expected: √m and √(m/(m − c)). Time: median per round of the five sites'
encrypt phase (the share's draw included) and the decryptor's phase.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from secure_fed.config import load_config
from secure_fed.crypto import keys
from secure_fed.crypto.scalars import (
    DECRYPT_PHASE,
    ENCRYPT_PHASE,
    HESettings,
    SizedValues,
    client_step,
    sum_scalars,
)
from secure_fed.crypto.secagg_identity import load_identity
from secure_fed.crypto.transport import LocalTransport
from secure_fed.site.private import SitePrivacy

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "hospital-scale-distributed.toml"
SITES = 5
RUN = "bench-alpha-shares"
TITLE = (
    "Released α sum's noise std over σ_α·C_α under CKKS, 5 sites, c = 1: each site's own σ_α against shares"
)
COLUMNS = ["α noise", "each site adds", "released / σ_α·C_α", "± s.e.", "expected"]


def _privacy(cfg: Any, site: str, n_val: int, shared: bool) -> SitePrivacy:
    plan = SitePrivacy.plan(cfg, site, 100, n_val, noise_key=os.urandom(32))
    plan.alpha_shared = shared  # before: the same plan with each site's own release
    return plan


def _round(
    transport_inputs: dict[int, Any],
    step: Callable[..., Any],
    settings: HESettings,
    round_id: int,
) -> tuple[np.ndarray, dict[str, float]]:
    transport = LocalTransport(transport_inputs, step)
    total = sum_scalars(transport, sorted(transport_inputs), round_id, settings)
    seconds = {
        phase: sum(transport.client_seconds.get(phase, {}).values())
        for phase in (ENCRYPT_PHASE, DECRYPT_PHASE)
    }
    return total, seconds


def measure(rounds: int, patients: int, quick: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        kit = Path(tmp) / "KEYS"
        names = [f"site{i}" for i in range(SITES)]
        keys.init_keys(kit, ["server", *names])
        cfg = load_config(CONFIG, {"he.enabled": True, "he.keys_dir": str(kit)})
        secret = keys.load_he_context(keys.secret_context_path(kit), True, keys.load_fingerprints(kit))
        settings = HESettings.from_keys_dir(kit)
        identities = {i: load_identity(kit, name, RUN) for i, name in enumerate(names)}
        t = cfg.data.max_visits
        rng = np.random.default_rng(0)  # the patients' values only; every noise draw is a keystream's
        out: dict[str, Any] = {"cases": []}
        for case, shared in (("before", False), ("after", True)):
            sites = {i: _privacy(cfg, name, patients, shared) for i, name in enumerate(names)}
            noise: list[np.ndarray] = []
            timings: dict[str, list[float]] = {ENCRYPT_PHASE: [], DECRYPT_PHASE: []}
            for round_id in range(1, rounds + 1):
                per_patient = {i: rng.normal(size=(patients, t)) * cfg.dp.alpha_clip for i in sites}
                clipped = {i: sites[i].clipped_alpha_sum(per_patient[i]) for i in sites}
                inputs: dict[int, Any] = {}
                for i, privacy in sites.items():
                    if shared:

                        def share(
                            m: int,
                            own: np.ndarray = clipped[i],
                            privacy: SitePrivacy = privacy,
                            r: int = round_id,
                        ) -> np.ndarray:
                            return privacy.alpha_share(own, m, privacy.noise_stream("alpha", r))

                        inputs[i] = SizedValues(t, share)
                    else:
                        inputs[i] = privacy.release_alpha_scalars(per_patient[i], round_id)

                def step(phase: str, request: dict, state: dict, values: Any, /) -> Any:
                    node = request.get("node_id")
                    identity = identities[node] if isinstance(node, int) else None
                    return client_step(phase, request, state, values, secret, identity, 3, node_id=node)

                total, seconds = _round(inputs, step, settings, round_id)
                noise.append(total - np.sum(list(clipped.values()), axis=0))
                for phase in timings:
                    timings[phase].append(seconds[phase])
            unit = sites[0].alpha_sigma * sites[0].alpha_clip
            values = np.concatenate(noise) / unit
            std = float(values.std())
            out["cases"].append(
                {
                    "case": case,
                    "shared": shared,
                    "samples": int(values.size),
                    "std_over_unit": std,
                    # the std of a sample std of n normal values is about std/√(2n)
                    "standard_error": std / math.sqrt(2 * values.size),
                    "expected": math.sqrt(SITES / (SITES - 1)) if shared else math.sqrt(SITES),
                    "per_site_std_over_unit": 1 / math.sqrt(SITES - 1) if shared else 1.0,
                    "encrypt_ms_per_round": 1e3 * statistics.median(timings[ENCRYPT_PHASE]),
                    "decrypt_ms_per_round": 1e3 * statistics.median(timings[DECRYPT_PHASE]),
                }
            )
        out.update(
            sites=SITES,
            colluders=sites[0].colluders,
            rounds=rounds,
            t=t,
            patients_per_site=patients,
            alpha_sigma=sites[0].alpha_sigma,
            alpha_clip=sites[0].alpha_clip,
            quick=quick,
        )
    return out


def shape(raw: dict[str, Any]) -> dict[str, Any]:
    """docs/results/bench-alpha-shares.json from the raw output (docs/results/alpha-shares.json)."""
    out = raw["output"]
    words = {
        "before": ("each site's own Gaussian release", "σ_α·C_α"),
        "after": ("shares sized for m − c of m verified", "σ_α·C_α/√(m − c)"),
    }
    rows = [
        [
            words[c["case"]][0],
            words[c["case"]][1],
            f"{c['std_over_unit']:.3f}",
            f"{c['standard_error']:.3f}",
            f"{c['expected']:.3f}",
        ]
        for c in out["cases"]
    ]
    cases = {c["case"]: c for c in out["cases"]}
    before, after = cases["before"], cases["after"]
    notes = [
        f"Settings: configs/hospital-scale-distributed.toml's α (σ_α = {out['alpha_sigma']:.4g} as the "
        f"site plans it, C_α = {out['alpha_clip']:g}), {out['sites']} sites, c = {out['colluders']}, "
        f"T = {out['t']}, {out['patients_per_site']} random validation patients a site, "
        f"{out['rounds']} rounds ({after['samples']:,} values per case).",
        "Measured: std of (the decrypted CKKS sum − the sites' clipped sums), through the real protocol "
        "(sum_scalars; client_step keys, encrypt, decrypt), over σ_α·C_α; expected: √m before, "
        "√(m/(m − c)) after (any m − c = 4 honest shares carry exactly σ_α·C_α).",
        "Time, median per round (the five sites' encrypt phases together, the decryptor's phase): "
        f"before {before['encrypt_ms_per_round']:.0f} ms and {before['decrypt_ms_per_round']:.0f} ms, "
        f"after {after['encrypt_ms_per_round']:.0f} ms and {after['decrypt_ms_per_round']:.0f} ms.",
    ]
    return {"title": TITLE, "source": raw["source"], "columns": COLUMNS, "rows": rows, "notes": notes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--patients", type=int, default=40, help="validation patients a site")
    parser.add_argument("--quick", action="store_true", help="smoke run: 20 rounds")
    parser.add_argument(
        "--record",
        nargs=3,
        metavar=("COMMIT", "MACHINE", "WALL"),
        help="also write docs/results/alpha-shares.json (raw) and bench-alpha-shares.json (the table)",
    )
    args = parser.parse_args()
    started = time.monotonic()
    output = measure(20 if args.quick else args.rounds, args.patients, args.quick)
    print(json.dumps(output, indent=2))
    if args.record:
        commit, machine, wall = args.record
        raw = {
            "title": TITLE,
            "source": {
                "command": "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/alpha_shares.py",
                "commit": commit,
                "date": time.strftime("%Y-%m-%d", time.gmtime()),
                "machine": machine,
                "wall": wall if wall != "-" else f"{time.monotonic() - started:.0f} s",
            },
            "output": output,
        }
        results = Path(__file__).resolve().parent.parent / "docs" / "results"
        (results / "alpha-shares.json").write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
        (results / "bench-alpha-shares.json").write_text(
            json.dumps(shape(raw), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )


if __name__ == "__main__":
    main()
