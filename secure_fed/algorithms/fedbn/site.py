"""FedBN's site half: the normalisation layers' parameters never leave the site."""

from __future__ import annotations

from torch import nn

from secure_fed import registry

NORMALISATION = (nn.GroupNorm, nn.BatchNorm2d, nn.LayerNorm)


class LocalNormalisation(registry.SiteHook):
    def shared(self, model: nn.Module, names: list[str]) -> list[str]:
        local = {
            f"{owner}.{p}" if owner else p
            for owner, m in model.named_modules()
            if isinstance(m, NORMALISATION)
            for p, _ in m.named_parameters(recurse=False)
        }
        return [n for n in names if n not in local]
