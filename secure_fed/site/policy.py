"""The site's own privacy policy, enforced on every server instruction before it is acted on.

A hardened site does not trust the server to ask for the right thing: it refuses a plain sum when
its policy requires secure aggregation, plaintext α scalars when it requires CKKS, and training
without DP when it requires DP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from secure_fed.config import RunConfig


class PolicyViolation(PermissionError):
    """The server asked for something this site's policy forbids."""


@dataclass(frozen=True)
class SitePolicy:
    require_dp: bool
    require_secagg: bool
    require_he: bool
    methods: frozenset[str] = frozenset()  # empty: any method

    @classmethod
    def from_config(cls, cfg: RunConfig) -> SitePolicy:
        return cls(
            require_dp=cfg.dp.enabled,
            require_secagg=cfg.secagg_on,
            require_he=cfg.he.enabled,
            methods=frozenset(cfg.fed.accepted_methods),
        )

    def check(self, phase: str, request: dict[str, Any]) -> None:
        if phase == "plain_sum" and self.require_secagg:
            raise PolicyViolation("policy requires secure aggregation: refusing to send an unmasked update")
        if phase == "plain_scalars" and self.require_he:
            raise PolicyViolation("policy requires CKKS: refusing to send plaintext α scalars")
        if phase == "train" and self.methods and str(request.get("method")) not in self.methods:
            raise PolicyViolation(
                f"policy accepts the methods {', '.join(sorted(self.methods))} (fed.accepted_methods), "
                f"not {request.get('method')!r}"
            )
        if phase == "train" and self.require_dp and not request.get("dp", False):
            raise PolicyViolation("policy requires DP-SGD: refusing a non-private training round")
        if phase == "evaluate" and request.get("split", "test") != "test":
            raise PolicyViolation(
                f"only the test split is scored for the server, not {request.get('split')!r}"
            )
