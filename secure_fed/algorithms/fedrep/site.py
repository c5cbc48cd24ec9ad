"""FedRep's site half, over a model with an `observer` (the representation) and a `head`."""

from __future__ import annotations

from torch import nn

from secure_fed import registry


class SharedRepresentation(registry.SiteHook):
    def shared(self, model: nn.Module, names: list[str]) -> list[str]:
        return [n for n in names if n.startswith("observer.")]  # each site keeps its own head

    def stages(self, model: nn.Module) -> list[nn.Module]:
        head, body = model.get_submodule("head"), model.get_submodule("observer")
        return [head, body]  # the head first, then the body
