"""FM2's model: an Observer backbone V, a class-wise MoE M_c that never leaves the site, a
domain-wise MoE M_d with one expert per modality of the federation's global vocabulary, combined
as y = γ_d·M_d(V(X)) + γ_c·M_c(V(X)) (seed 001, Eq. 1), and a local caption encoder for CEL.

The split of parameters is the privacy-relevant fact: `shared_state` (V and M_d) is what a site
may upload, `local_state` (M_c, the classifier head of stage 1, the text encoder) is not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn
from torch.nn import functional as F


class Observer(nn.Module):
    """A small residual CNN (the seed's ResNet-4 scale) giving a `dim`-vector per image."""

    def __init__(self, dim: int = 64, channels: int = 1) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(channels, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.ReLU())
        self.block = nn.Sequential(
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.GroupNorm(4, 32),
            nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding=1),
            nn.GroupNorm(4, 32),
            nn.ReLU(),
        )
        self.skip = nn.Conv2d(16, 32, 1, stride=2)
        self.out = nn.Linear(32, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        h = self.block(h) + self.skip(h)
        return self.out(h.mean(dim=(2, 3)))


class Experts(nn.Module):
    """N two-layer MLP experts evaluated together: (batch, dim) → (batch, N, out).

    Plain `nn.Linear` layers, so DP-SGD gets each image's gradient from Opacus' per-row rules."""

    def __init__(self, n: int, dim: int, hidden: int, out: int) -> None:
        super().__init__()
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, out)) for _ in range(n)
        )

    def __len__(self) -> int:
        return len(self.experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([expert(x) for expert in self.experts], dim=1)


class ClassMoE(nn.Module):
    """M_c: N_c experts mixed by a learned softmax gate (personal: stays on the site)."""

    def __init__(self, n: int, dim: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.experts = Experts(n, dim, hidden, classes)
        self.gate = nn.Linear(dim, n)

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        weights = F.softmax(self.gate(v), dim=-1)
        return torch.einsum("bn,bno->bo", weights, self.experts(v))


class DomainMoE(nn.Module):
    """M_d: one expert per modality, chosen by the image's modality index (declared, not learned)."""

    def __init__(self, modalities: int, dim: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.experts = Experts(modalities, dim, hidden, classes)

    def forward(self, v: torch.Tensor, modality: torch.Tensor) -> torch.Tensor:
        out = self.experts(v)
        return out[torch.arange(len(v)), modality]


class CaptionEncoder(nn.Module):
    """A local bag-of-words caption encoder for CEL, into the Observer's feature space."""

    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab, dim, mode="mean")

    def forward(self, tokens: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.embed(tokens, offsets)


class FM2Model(nn.Module):
    def __init__(
        self,
        classes: int,
        modalities: int,
        dim: int = 64,
        hidden: int = 64,
        class_experts: int = 4,
        gamma_d: float = 0.5,
        gamma_c: float = 0.5,
        caption_vocab: int = 0,
    ) -> None:
        super().__init__()
        self.observer = Observer(dim)
        self.head = nn.Linear(dim, classes)  # stage 1's F_h: trains the Observer, stays local
        self.cmoe = ClassMoE(class_experts, dim, hidden, classes)
        self.dmoe = DomainMoE(modalities, dim, hidden, classes)
        self.text = CaptionEncoder(caption_vocab, dim) if caption_vocab else None
        self.gamma_d, self.gamma_c = gamma_d, gamma_c

    def stage1(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.observer(x))

    def forward(self, x: torch.Tensor, modality: torch.Tensor) -> torch.Tensor:
        v = self.observer(x)
        return self.gamma_d * self.dmoe(v, modality) + self.gamma_c * self.cmoe(v)

    def shared_state(self) -> dict[str, torch.Tensor]:
        """What may leave the site (and only through the federation's secure sum): V and M_d."""
        return {
            k: v for k, v in self.state_dict().items() if k.startswith("observer.") or k.startswith("dmoe.")
        }

    def local_state(self) -> dict[str, torch.Tensor]:
        shared = self.shared_state()
        return {k: v for k, v in self.state_dict().items() if k not in shared}


def observer_top_k(scores: torch.Tensor, labels: torch.Tensor, k: int) -> list[int]:
    """Top-K Sampling: per class, the K samples whose own-class score sigmoid(V(x))_z is highest."""
    own = torch.sigmoid(scores[torch.arange(len(labels)), labels])
    chosen: list[int] = []
    for z in labels.unique().tolist():
        members = (labels == z).nonzero().flatten()
        best = members[own[members].argsort(descending=True)[:k]]
        chosen.extend(best.tolist())
    return sorted(chosen)


def cel_loss(visual: torch.Tensor, text: torch.Tensor, tau: float = 0.07) -> torch.Tensor:
    """Caption-Enhanced Learning (seed Eq. 4): InfoNCE between an image and its own caption."""
    v, t = F.normalize(visual, dim=-1), F.normalize(text, dim=-1)
    logits = v @ t.T / tau
    return F.cross_entropy(logits, torch.arange(len(v)))


def expert_counts(modality: torch.Tensor, modalities: int) -> torch.Tensor:
    """How many of a site's samples each domain expert saw: the weights of its M_d upload."""
    return torch.bincount(modality, minlength=modalities).to(torch.float64)


def _expert_of(name: str) -> int:
    """`experts.experts.<e>.…` → e: which domain expert a DMoE parameter belongs to."""
    return int(name.split(".")[2])


def dmoe_upload(dmoe: DomainMoE, delta: Mapping[str, torch.Tensor], weights: torch.Tensor) -> torch.Tensor:
    """The site's M_d contribution to a secure sum: each expert's change this round times that
    expert's weight (the samples that trained it, or under DP 1 for every expert: public), then
    the weights. An expert the site never used adds zeros."""
    parts = [
        (delta[name].to(torch.float64) * weights[_expert_of(name)]).flatten()
        for name, _ in dmoe.named_parameters()
    ]
    return torch.cat([*parts, weights.to(torch.float64)])


def dmoe_from_sum(total: torch.Tensor, current: DomainMoE) -> dict[str, torch.Tensor]:
    """The aggregated M_d from the sum of uploads: each expert moves by the weighted mean change
    over the sites that trained it; an expert nobody trained keeps its current value."""
    weights = total[-len(current.experts) :]
    out: dict[str, torch.Tensor] = {}
    offset = 0
    for name, p in current.named_parameters():
        size = p.numel()
        summed = total[offset : offset + size].view_as(p).to(torch.float64)
        offset += size
        w = weights[_expert_of(name)]
        step = summed / w if w > 0 else torch.zeros_like(summed)
        out[name] = (p.detach().to(torch.float64) + step).to(p.dtype)
    return out


def modality_index(names: Sequence[str], vocabulary: Sequence[str]) -> torch.Tensor:
    """Indices of modalities in the federation's global vocabulary (DMoE's expert ids)."""
    lookup = {m: i for i, m in enumerate(vocabulary)}
    unknown = sorted(set(names) - set(lookup))
    if unknown:
        raise ValueError(f"modalities {unknown} are not in the federation's vocabulary {list(vocabulary)}")
    return torch.tensor([lookup[m] for m in names])
