"""How many sites a run can lose: the privacy rule's floor of survivors and the SecAgg+ threshold
(`DropoutTolerance`), checked before the first round and quoted when a run ends for lack of sites."""

from __future__ import annotations

from dataclasses import dataclass

from secure_fed.config import RunConfig
from secure_fed.server.aggregation import AggregationSettings


@dataclass(frozen=True)
class DropoutTolerance:
    """How many sites a run can lose, from the privacy rule and the SecAgg+ threshold.

    sites: sites at the start. fewest: the fewest a round may sum over — a secure sum never has fewer
    than 3 survivors (with 2, each learns the other's update from the global model), never fewer
    than fed.min_sites, and with distributed DP never fewer than h (`honest_min`: a site unmasks no
    sum of fewer survivors, so the noise its share was sized for is there). run: sites the run can
    lose and still finish (a round that loses sites mid-way is skipped and the next goes on with
    those left). in_round: sites a round can lose after
    it started and still produce its sum: each survivor needs `threshold` of its `degree` SecAgg+
    neighbours alive to rebuild its self-mask, so at most degree - threshold may go.
    """

    sites: int
    fewest: int
    run: int
    in_round: int
    degree: int | None = None
    threshold: int | None = None
    honest_min: int | None = None  # distributed DP's h; None in site mode

    def _honest_floor(self) -> bool:
        return self.honest_min is not None and self.honest_min == self.fewest and self.fewest > 3

    def describe(self) -> str:
        if self._honest_floor():
            rule = (
                f"distributed DP: a site unmasks no sum of fewer than h = {self.fewest} survivors "
                "(dp.honest_min)"
            )
        elif self.fewest >= 3:
            rule = f"a secure sum keeps at least {self.fewest} sites"
        else:
            rule = f"a round needs at least {self.fewest} sites (fed.min_sites)"
        line = f"dropouts: {self.sites} sites; the run tolerates {self.run} ({rule})"
        if self.degree is not None:
            # the same numbers a round's SecAgg+ abort gives ("N sites left, at least M needed")
            kept = self.sites - self.in_round
            line += (
                f"; within a round SecAgg+ needs {kept} of its {self.sites} sites (threshold "
                f"{self.threshold} of {self.degree} neighbours for each survivor): "
                + (f"up to {self.in_round} may leave mid-round, " if self.in_round else "")
                + "a round that loses "
                + ("more" if self.in_round else "a site")
                + (" is skipped and the next goes on with the sites left" if self.run else " ends the run")
            )
        return line

    def remedy(self) -> str:
        if self._honest_floor():
            return (
                f"add sites, lower fed.dropouts, or lower dp.honest_min (h = {self.fewest}; each site's "
                "noise share is then sized for fewer honest sites, so the sum carries more noise)"
            )
        return (
            f"add sites (each one more tolerates one more dropout), or lower fed.dropouts; the floor of "
            f"{self.fewest} survivors is the privacy rule and cannot be lowered"
        )

    def refusal(self, asked: int, absent: int = 0) -> str:
        demand = f"fed.dropouts = {asked}"
        if absent:
            demand += f" with {absent} site(s) absent at the start leaves {asked - absent} to tolerate"
        return f"{demand}, but {self.describe().removeprefix('dropouts: ')}: {self.remedy()}"

    def abort_message(self, left: int, gone: list[str]) -> str:
        return (
            f"run aborted: {left} of {self.sites} sites left ({', '.join(gone) or 'none'} gone), at "
            f"least {self.fewest} needed — the run tolerates {self.run} dropout(s); {self.remedy()}"
        )


def dropout_tolerance(cfg: RunConfig, n_sites: int, aggregation: AggregationSettings) -> DropoutTolerance:
    secure = aggregation.secagg is not None or aggregation.he is not None
    fewest = max(3, cfg.fed.min_sites) if secure else cfg.fed.min_sites
    honest = None
    if cfg.dp.enabled and cfg.dp.noise == "distributed":
        from secure_fed.dp.distributed.run import honest_min

        honest = honest_min(cfg, n_sites)
        fewest = max(fewest, honest)
    run = max(0, n_sites - fewest)
    if aggregation.secagg is None or n_sites < 3:
        return DropoutTolerance(n_sites, fewest, run, run, honest_min=honest)
    from secure_fed.crypto.secagg_protocol import round_params

    params = round_params(n_sites, 1, aggregation.secagg)
    in_round = max(0, min(run, params.degree - params.threshold))
    return DropoutTolerance(n_sites, fewest, run, in_round, params.degree, params.threshold, honest)
