"""Reading the payloads besides `privacy` that verify and report rely on.

- `run_config`: the run's configuration (RunConfig as JSON). Only the switches that decide what
  leaves a site are read, leniently, so that a partial snapshot still counts.
- `secagg_round`: who took part in a round's sum. `participants` are the sites whose training
  reply the server accepted; `survivors` and `dropped` split them by the secure sum's outcome.
- `budget_refusal`: a site that declined a round (`site`).
- `instruction`: a server message a site acted on or not: {"phase": str, "round": int | null,
  "digest": SHA-256 hex of the request, "outcome": "acted" | "refused" | "error", "code": str |
  null}; optional "detail" (str). Further keys are allowed: a newer writer may add some.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

OUTCOMES = ("acted", "refused", "error")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class RunSettings:
    """What the run's configuration says leaves a site; None where the snapshot does not say."""

    dp: bool | None
    secagg: bool | None
    he: bool | None
    method: str | None
    # dp.noise ("site" | "distributed") and, distributed, its h (None: all sites but c) and c
    noise: str | None = None
    honest_min: int | None = None
    colluders: int | None = None
    # distributed: the Poisson-subsampling bound ε was counted with ("symmetric" | "general")
    amplification: str | None = None


def _section(config: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = config.get(name)
    return value if isinstance(value, Mapping) else {}


def _flag(section: Mapping[str, Any], key: str = "enabled") -> bool | None:
    value = section.get(key)
    return value if isinstance(value, bool) else None


def run_settings(config: Mapping[str, Any]) -> RunSettings:
    dp_section = _section(config, "dp")
    enabled = _flag(dp_section)
    # a noise-free reference runs DP-SGD's sampling and clipping without noise: not DP, so no
    # privacy record is owed and its releases read as ε = ∞
    dp = False if enabled and _flag(dp_section, "noise_free_reference") else enabled
    secagg = _flag(_section(config, "secagg"))
    if secagg is None:
        # secure_fed.config: secagg.enabled = None (the default) means "on exactly when dp.enabled".
        secagg = enabled
    method = _section(config, "fed").get("method", config.get("method"))
    noise, h, c = dp_section.get("noise"), dp_section.get("honest_min"), dp_section.get("colluders")
    # a distributed run's snapshot without the key predates it: its plan used the general bound
    amplification = dp_section.get("amplification", "general") if noise == "distributed" else None
    return RunSettings(
        dp=dp,
        secagg=secagg,
        he=_flag(_section(config, "he")),
        method=method if isinstance(method, str) else None,
        noise=noise if isinstance(noise, str) else None,
        honest_min=h if isinstance(h, int) and not isinstance(h, bool) else None,
        colluders=c if isinstance(c, int) and not isinstance(c, bool) else None,
        amplification=amplification if isinstance(amplification, str) else None,
    )


def record_round(record: Mapping[str, Any]) -> int | None:
    """The round a record is about: its own `round`, else the payload's (older writers)."""
    for value in (record.get("round"), record.get("payload", {}).get("round")):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _names(value: object) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def round_sites(payload: Mapping[str, Any]) -> tuple[list[str], set[str]]:
    """(sites that took part in the round, every site the round's record accounts for)."""
    participants = _names(payload.get("participants"))
    named = set(participants) | set(_names(payload.get("survivors"))) | set(_names(payload.get("dropped")))
    return participants, named


def instruction_problem(payload: Mapping[str, Any]) -> str | None:
    """Why `payload` is not an `instruction` payload, or None when it is."""
    missing = [key for key in ("phase", "round", "digest", "outcome", "code") if key not in payload]
    if missing:
        return f"missing {missing}"
    wrong = []
    if not isinstance(payload["phase"], str) or not payload["phase"]:
        wrong.append(f"phase {payload['phase']!r} is not a non-empty string")
    round_ = payload["round"]
    if round_ is not None and (isinstance(round_, bool) or not isinstance(round_, int)):
        wrong.append(f"round {round_!r} is neither an integer nor null")
    if not isinstance(payload["digest"], str) or not _SHA256_HEX.fullmatch(payload["digest"]):
        wrong.append(f"digest {payload['digest']!r} is not a SHA-256 hex digest")
    if payload["outcome"] not in OUTCOMES:
        wrong.append(f"outcome {payload['outcome']!r} is not one of {list(OUTCOMES)}")
    if payload["code"] is not None and not isinstance(payload["code"], str):
        wrong.append(f"code {payload['code']!r} is neither a string nor null")
    if "detail" in payload and not isinstance(payload["detail"], str):
        wrong.append("detail is not a string")
    return "; ".join(wrong) or None
