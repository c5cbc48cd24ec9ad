"""FedBN (Li et al. 2021): FedAvg's server step over every layer but the normalisation layers, which
each site keeps (the site's learner leaves them out of its upload)."""

from __future__ import annotations

from secure_fed.server.strategies.fedavg import FedAvg


class FedBN(FedAvg):
    name = "fedbn"
