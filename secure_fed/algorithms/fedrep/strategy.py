"""FedRep (Collins et al. 2021): FedAvg's server step over the shared representation only; each site
keeps its own head and trains it first, then the body (the site's learner decides what is shared)."""

from __future__ import annotations

from secure_fed.server.strategies.fedavg import FedAvg


class FedRep(FedAvg):
    name = "fedrep"
