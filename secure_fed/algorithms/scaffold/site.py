"""SCAFFOLD's site half: the site's control c_k, the round's gradient correction c − c_k, and the
control change uploaded with the model change (option II: c_k⁺ = c_k − c + (w_start − w_end)/(K·lr))."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from secure_fed import registry
from secure_fed.model.vectors import flatten, unflatten

MEMORY_KEY = "scaffold_c"  # the key in a Flower node's context.state


class ControlVariates(registry.SiteHook):
    def __init__(self) -> None:
        self.local_c: dict[str, torch.Tensor] | None = None
        self._server_c: dict[str, torch.Tensor] = {}
        # a restored control before the first round: unflattened once the model's template is known
        self._pending: np.ndarray | None = None

    def _local(self, template: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if self._pending is not None:
            self.local_c, self._pending = unflatten(torch.as_tensor(self._pending), template), None
        return self.local_c or {n: torch.zeros_like(v) for n, v in template.items()}

    def correction(
        self, template: dict[str, torch.Tensor], options: dict[str, Any]
    ) -> dict[str, torch.Tensor] | None:
        self._server_c = unflatten(torch.tensor(np.asarray(options["control"])), template)
        local_c = self._local(template)
        return {n: self._server_c[n] - local_c[n] for n in template}

    def extra_upload(
        self, start: dict[str, torch.Tensor], final: dict[str, torch.Tensor], steps: int, lr: float
    ) -> torch.Tensor:
        local_c, server_c = self._local(start), self._server_c
        steps = max(steps, 1)
        new_c = {n: local_c[n] - server_c[n] + (start[n] - final[n]) / (steps * lr) for n in start}
        control_delta = flatten(new_c) - flatten(local_c)
        self.local_c = new_c
        return control_delta

    def memory(self) -> dict[str, np.ndarray]:
        if self.local_c is not None:
            return {MEMORY_KEY: flatten(self.local_c).numpy()}
        return {} if self._pending is None else {MEMORY_KEY: self._pending}

    def restore(self, memory: dict[str, np.ndarray]) -> None:
        if MEMORY_KEY in memory:
            self.local_c, self._pending = None, np.asarray(memory[MEMORY_KEY])
