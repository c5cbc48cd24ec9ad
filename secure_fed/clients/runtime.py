"""Everything one site does in a round, independent of how messages travel."""

from __future__ import annotations

import hashlib
import io
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from secure_fed.clients.coarsen import bucket_floor
from secure_fed.clients.evaluation import evaluate_split, free_text_labeler
from secure_fed.clients.factors import check_factors
from secure_fed.clients.guard import Refusal, SiteGuard
from secure_fed.clients.hypergrad import flatten, per_patient_hypergradients, unflatten
from secure_fed.clients.private import TRAIN, SitePrivacy
from secure_fed.clients.profile import fit_gmm
from secure_fed.clients.site import SiteData, attach_profiles, load_site, patient_profiles
from secure_fed.clients.trail import SiteTrail
from secure_fed.clients.training import LocalTrainSettings, train_copies
from secure_fed.config import RunConfig
from secure_fed.crypto.secagg_client import upload_fingerprint
from secure_fed.crypto.secagg_identity import SecAggIdentity, load_identity
from secure_fed.data.tokenizer import load_tokenizer
from secure_fed.dp.histogram import histogram_event
from secure_fed.dp.private_files import atomic_write_bytes, load_or_create_noise_key
from secure_fed.dp.site_ledger import SiteLedger
from secure_fed.model.report_model import ReportModel
from secure_fed.model.setup import build_report_model

if TYPE_CHECKING:
    from secure_fed.algorithms.fm2.learner import ImagingLearner

log = logging.getLogger(__name__)

POOLED = {"fedavg", "fedprox", "fedadam", "scaffold", "drfa"}
ALPHA_METHODS = {"fedtar", "fedtar-no-gmm"}  # the methods whose server asks for α hypergradients


def visit_groups(method: str, t_max: int) -> list[int] | None:
    """Visit indices of the per-timestep copies; None = one pooled copy over all visits."""
    return None if method in POOLED else list(range(1, t_max + 1))


def save_release(path: Path, values: np.ndarray) -> None:
    """A released value, written so that a crash leaves the old file or the new one, never a torn
    one a restarted site would misread as "nothing released yet" and then release again."""
    buffer = io.BytesIO()
    np.save(buffer, values)
    atomic_write_bytes(path, buffer.getvalue())


def _site_privacy(
    cfg: RunConfig,
    site: str,
    folder: Path,
    trail: SiteTrail | None,
    n_train: int,
    n_val: int,
    passes: int,
    alpha: bool,
) -> SitePrivacy | None:
    """The site's DP plan (None without DP), its ledger resumed from the site's private folder."""
    if not cfg.dp.enabled:
        return None
    privacy = SitePrivacy.plan(
        cfg,
        site,
        n_train,
        n_val,
        noise_key=load_or_create_noise_key(folder / "noise.key"),
        passes=passes,
        alpha=alpha,
    )
    privacy.trail = trail
    privacy.load_ledger(folder / "ledger.json")
    return privacy


class BudgetExhausted(Refusal, ValueError):
    """A release the site's lifetime budget cannot afford (a one-line error for `secure-fed run`)."""


def _join_lifetime(
    cfg: RunConfig,
    site: str,
    folder: Path,
    keys_dir: Path | None,
    run_id: str,
    privacy: SitePrivacy | None,
    trail: SiteTrail | None,
) -> SiteLedger | None:
    """The site's persistent ledger (`[dp] ledger_dir`), joined to this run's before anything is
    released: the earlier runs' spending counts towards every admission from the GMM on."""
    from secure_fed.clients.lifetime import keep_anchor, log_lifetime_start, open_lifetime

    store = open_lifetime(cfg, site, keys_dir)
    if store is None:
        return None
    if privacy is not None:
        store.attach(run_id, privacy.ledger)
        log_lifetime_start(trail, folder, site, privacy, store, run_id)
    keep_anchor(cfg, store, keys_dir)
    return store


def _gmm_release(
    site: str,
    folder: Path,
    run_id: str,
    privacy: SitePrivacy | None,
    lifetime: SiteLedger | None,
    trail: SiteTrail | None,
) -> tuple[Path | None, float | None, bool]:
    """(histogram file, σ, whether to charge) of the GMM's noisy histogram. With a lifetime ledger
    the patients pay for one histogram, ever: a later run refits from the one kept beside the ledger
    (post-processing, whatever σ this run would pick). A new draw is admitted by the lifetime budget
    first, and refused (nothing drawn) when it cannot afford it."""
    if privacy is None:
        return None, None, False
    if lifetime is None:
        return folder / "gmm-histogram.json", privacy.histogram_sigma, True
    path = lifetime.histogram_path
    if path.exists() and lifetime.released_before(run_id, "gmm_histogram"):
        return path, float(json.loads(path.read_text())["sigma"]), False
    if 0 not in privacy.ledger.rounds(site, TRAIN):  # not charged in this run before a restart
        event = histogram_event(privacy.histogram_sigma)
        eps = privacy.ledger.projected_epsilon(site, TRAIN, [event], delta=privacy.delta[TRAIN])
        value = eps.get(privacy.accountant) or eps["rdp"]
        if value is not None and value > privacy.budget:
            reason = (
                f"the GMM histogram would bring {TRAIN} patients to ε = {value:.3f} over all runs "
                f"(ledger {lifetime.path}), above this site's budget {privacy.budget:g}"
            )
            if trail is not None:
                trail.append(
                    "budget_refusal",
                    {"site": site, "population": TRAIN, "epsilon_after": value, "budget": privacy.budget,
                     "reason": reason},
                    0,
                )  # fmt: skip
            raise BudgetExhausted("budget_exhausted", f"site {site}: {reason}")
    return path, privacy.histogram_sigma, True


@dataclass
class SiteRuntime:
    """One site: its guard, budget, releases and audit trail around a learner. The report model
    (FedTAR and its baselines) is built in: `data` and `model`; an algorithm folder's learner (FM2
    and the imaging baselines) comes as `learner`, and then `data` and `model` are None."""

    cfg: RunConfig
    site: str
    data: SiteData | None
    model: ReportModel | None
    privacy: SitePrivacy | None
    scaffold_c: dict[str, torch.Tensor] | None = None
    stash: dict[str, Any] = field(default_factory=dict)

    trail: SiteTrail | None = None
    keys_dir: Path | None = None  # the site's provisioned keys: its signing key, peers' public keys
    run_id: str = ""
    learner: ImagingLearner | None = None
    # the site's persistent ledger (every run's releases, the test splits scored): `[dp] ledger_dir`
    lifetime: SiteLedger | None = None
    # a hospital's own node facing a server it does not control (clients/app.py sets it): its test
    # split is scored once in the life of its data. `secure-fed run` and sweeps hold the data and
    # play the server themselves, so a later run of theirs is scored again.
    deployed: bool = False
    # the node id messages reach this site under (Flower's context.node_id, the in-process index):
    # the runtime's own, so no request can make the site act as another node
    node_id: int | None = None
    guard: SiteGuard = field(init=False)
    _identity: SecAggIdentity | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.guard = SiteGuard.load(self.folder / "guard.json", self.run_id)

    @property
    def folder(self) -> Path:
        """Site-private working folder (ledger, released values); never sent anywhere."""
        return Path(self.cfg.out) / "sites" / self.site

    @classmethod
    def create(
        cls,
        cfg: RunConfig,
        site: str,
        site_key: bytes | None = None,
        keys_dir: Path | None = None,
        run_id: str = "",
    ) -> SiteRuntime:
        if cfg.train.threads is not None:
            # This process may be a Ray actor or a SuperNode's: `secure-fed run` never set its
            # threads, and torch's default (every core) oversubscribes a shared machine: with one
            # of 2 cores busy, a step on two threads took 4-6 times one thread's (BENCHMARKS.md).
            torch.set_num_threads(cfg.train.threads)
        folder = Path(cfg.out) / "sites" / site
        folder.mkdir(parents=True, exist_ok=True)
        trail = None
        if cfg.audit.enabled and keys_dir is not None:
            trail = SiteTrail(Path(cfg.out) / "audit" / f"{site}.jsonl", site, run_id, keys_dir)
        if cfg.data.kind == "imaging":
            return cls._with_learner(cfg, site, folder, trail, keys_dir, run_id)
        data = load_site(cfg, site, site_key)
        # only FedTAR's temporal meta-learning releases α scalars: no other method's validation
        # patients are charged for a release that never happens
        privacy = _site_privacy(
            cfg,
            site,
            folder,
            trail,
            data.n_train_patients,
            data.n_val_patients,
            1,
            cfg.fed.method in ALPHA_METHODS,
        )
        lifetime = _join_lifetime(cfg, site, folder, keys_dir, run_id, privacy, trail)
        histogram, sigma, charge = _gmm_release(site, folder, run_id, privacy, lifetime, trail)
        gmm, event = fit_gmm(
            patient_profiles(data.train),
            cfg.model.gmm_components,
            cfg.model.gmm_reg_covar,
            cfg.seed,
            sigma,
            noise_rng=privacy.noise_stream("gmm_histogram", 0) if privacy else None,
            # the noise cannot be redrawn: a restart (or, with a lifetime ledger, any later run)
            # refits from the histogram released before
            release_path=histogram,
        )
        if privacy is not None and event is not None and charge:
            privacy.record_gmm(event)
        attach_profiles(data, gmm)
        model = build_report_model(cfg)
        if trail is not None:  # exact sizes for the site's auditors; never in a record the server copies
            trail.append(
                "population_sizes",
                {"train": data.n_train_patients, "validation": data.n_val_patients, "test": len(data.test)},
            )
        runtime = cls(
            cfg=cfg,
            site=site,
            data=data,
            model=model,
            privacy=privacy,
            trail=trail,
            keys_dir=keys_dir,
            run_id=run_id,
            lifetime=lifetime,
        )
        if privacy is not None and cfg.dp.noise == "distributed":
            runtime._plan_distributed()
        return runtime

    def _plan_distributed(self) -> None:
        """The run's distributed plan, from this site's own config, the model's size and the sites
        it holds keys for (never from the server)."""
        from secure_fed.distributed_plan import check_honest_min, plan_for

        assert self.privacy is not None
        sites = self._provisioned_sites()
        if sites is None:
            raise Refusal("no_keys", "dp.noise = 'distributed' needs the sites' provisioned keys (SecAgg+)")
        dim = sum(p.numel() for p in self._report()[1].parameters() if p.requires_grad)
        check_honest_min(self.cfg, len(sites))
        plan = plan_for(self.cfg, dim, len(sites))
        # its privacy records carry the mode, h, c and the plan, in the site's signed log
        self.privacy.set_distributed(plan)

    @classmethod
    def _with_learner(
        cls,
        cfg: RunConfig,
        site: str,
        folder: Path,
        trail: SiteTrail | None,
        keys_dir: Path | None,
        run_id: str,
    ) -> SiteRuntime:
        from secure_fed.algorithms.fm2.learner import ImagingLearner, passes

        learner = ImagingLearner.create(cfg, site, folder)
        privacy = _site_privacy(cfg, site, folder, trail, learner.n_train, 0, passes(cfg.fed.method), False)
        lifetime = _join_lifetime(cfg, site, folder, keys_dir, run_id, privacy, trail)
        if trail is not None:
            trail.append(
                "population_sizes", {"train": learner.n_train, "validation": 0, "test": learner.n_test}
            )
        return cls(
            cfg=cfg,
            site=site,
            data=None,
            model=None,
            privacy=privacy,
            trail=trail,
            keys_dir=keys_dir,
            run_id=run_id,
            learner=learner,
            lifetime=lifetime,
        )

    def _report(self) -> tuple[SiteData, ReportModel]:
        if self.data is None or self.model is None:
            raise Refusal("bad_request", f"{self.cfg.fed.method} has no report model at this site")
        return self.data, self.model

    def log_instruction(
        self, phase: str, round_id: Any, digest: str, outcome: str, code: str | None, detail: str | None
    ) -> None:
        """Every server instruction, acted on or not, in the site's own log (details stay here)."""
        if self.trail is None or self.trail.log.closed:
            return
        round_no = round_id if isinstance(round_id, int) and not isinstance(round_id, bool) else None
        payload = {"phase": phase, "round": round_no, "digest": digest, "outcome": outcome, "code": code}
        if detail:
            payload["detail"] = detail
        self.trail.append("instruction", payload, round_no)

    def _provisioned_sites(self) -> set[str] | None:
        """The sites this one holds a provisioned public key for (None: no keys, so no secure sum)."""
        if self.keys_dir is None:
            return None
        return set(self.identity().peer_public_keys) | {self.site}

    def identity(self) -> SecAggIdentity:
        """This site's signing identity for SecAgg+ and the α masks, read from its keys once."""
        if self._identity is None:
            self._identity = load_identity(self.keys_dir, self.site, self.run_id)
        return self._identity

    def _check_state_vector(self, value: Any, what: str) -> np.ndarray:
        vec = np.asarray(value)
        if self.learner is not None:
            dim = self.learner.dim()
        else:
            dim = sum(p.numel() for p in self._report()[1].parameters() if p.requires_grad)
        if vec.shape != (dim,) or not np.issubdtype(vec.dtype, np.floating) or not np.all(np.isfinite(vec)):
            raise Refusal(
                "bad_request", f"{what} must be {dim} finite floats, got shape {vec.shape} {vec.dtype}"
            )
        return vec.astype(np.float64)

    # -- phase: train -------------------------------------------------------------------------
    def train(
        self, round_id: int, method: str, global_vec: np.ndarray, options: dict[str, Any]
    ) -> dict[str, Any]:
        cfg = self.cfg
        global_vec = self._check_state_vector(global_vec, "the global state")
        scaled = "factors" in options or "factor_sites" in options
        factors = check_factors(
            options, self.site, cfg.fed.factor_floor, self._provisioned_sites() if scaled else None
        )
        self.guard.check_training(round_id)
        self.guard.save()
        released = self.folder / f"release-r{round_id}.npy"
        if self.privacy is not None:
            if self.privacy.already_released(round_id) and released.exists():
                # A retried round (after a crash) re-sends the very values released before:
                # nothing new is disclosed and the ledger charges the round once.
                self._stash_upload(np.load(released))
                context = released.with_suffix(".factors")
                self.stash["secagg_context"] = context.read_bytes() if context.exists() else b""
                members = released.with_suffix(".factor-sites")
                self.stash["secagg_members"] = json.loads(members.read_text()) if members.exists() else []
                self.stash["upload_round"] = round_id
                self.guard.trained_round(round_id)
                self.guard.save()
                return {
                    "status": "ok",
                    "dim": int(self.stash["upload"].size),
                    "steps": 0,
                    "train_loss": float("nan"),
                    **self.privacy.after_round_summary(),
                }
            if self.privacy.already_released(round_id):
                return {
                    "status": "declined",
                    "population": "train",
                    "budget": self.privacy.budget,
                    "would_be_epsilon": self.privacy.after_round_summary()["epsilon_rdp"],
                    "reason": f"round {round_id} was charged before a restart but its release was lost; "
                    "sitting it out rather than releasing twice",
                }
            admission = self.privacy.admit_round(round_id)
            if not admission.ok:
                self.stash.pop("upload", None)
                if self.trail is not None:
                    self.trail.append(
                        "budget_refusal",
                        {
                            "site": self.site,
                            "population": self.privacy.refused_population,
                            "epsilon_after": admission.would_be_epsilon,
                            "budget": self.privacy.budget,
                            "reason": admission.reason,
                        },
                        round_id,
                    )
                return {
                    "status": "declined",
                    "reason": admission.reason,
                    "would_be_epsilon": admission.would_be_epsilon,
                    "budget": self.privacy.budget,
                    "population": self.privacy.refused_population or "",
                }
        if self.learner is not None:
            gradients = (lambda: self.privacy.gradients(round_id)) if self.privacy is not None else None
            update = self.learner.local_update(round_id, method, global_vec, gradients)
            upload, steps, mean_loss = update.upload * factors.own, update.steps, update.mean_loss
        elif self.privacy is not None and self.privacy.distributed is not None:
            if scaled:
                # a factor would weigh this site's noise share, not only its patients' gradients
                raise Refusal("bad_request", "dp.noise = 'distributed' takes no server-chosen factors")
            upload, steps, mean_loss = self._distributed_update(round_id, global_vec)
        else:
            upload, steps, mean_loss = self._report_update(round_id, method, global_vec, options)
            upload = upload * factors.own
        self._stash_upload(upload)
        self.stash["secagg_context"] = factors.digest
        self.stash["secagg_members"] = list(factors.sites)
        self.stash["upload_round"] = round_id
        if self.privacy is not None:
            # the factors first: a retry re-sends the release under the vector it was made with
            atomic_write_bytes(released.with_suffix(".factors"), factors.digest)
            sites = json.dumps(list(factors.sites)).encode()
            atomic_write_bytes(released.with_suffix(".factor-sites"), sites)
            save_release(released, upload)
        self.guard.trained_round(round_id)
        self.guard.save()
        reply: dict[str, Any] = {
            "status": "ok",
            "dim": int(upload.size),
            "steps": steps,
            "train_loss": mean_loss if self._losses_leave() else float("nan"),
        }
        if self.privacy is not None:
            reply.update(self.privacy.after_round_summary())
            if self.privacy.distributed is not None:
                from secure_fed.distributed_plan import plan_digest

                # the public power-of-two floor of its patients (as its privacy record's range): the
                # server's divisor for the expected batch, q × Σ floors
                reply["population_floor"] = bucket_floor(self.privacy.n_patients[TRAIN])
                # which plan the share was encoded with: a server on another plan would decode noise
                reply["distributed_plan"] = plan_digest(self.privacy.distributed)
        if self.trail is not None:
            reply["audit_records"] = self.trail.take_pending()
        return reply

    def _distributed_update(self, round_id: int, global_vec: np.ndarray) -> tuple[np.ndarray, int, float]:
        """One distributed-DP step: this site's clipped gradient sum over its Poisson-sampled
        patients, encoded with its noise share into the ring (its keystream draws the sample, the
        rounding and the noise); the server decodes only the sum over the survivors."""
        from secure_fed.clients.distributed import clipped_gradient_sum
        from secure_fed.distributed_plan import round_seed
        from secure_fed.dp.distributed import encode_share

        assert self.privacy is not None
        data, model = self._report()
        start = unflatten(torch.tensor(global_vec), model.trainable_state())
        stream = self.privacy.noise_stream("distributed_dp", round_id)
        clipped, sampled = clipped_gradient_sum(
            model, start, data.train, self.privacy.clip, self.privacy.sampling_rate,
            self.privacy.n_patients[TRAIN], stream,
        )  # fmt: skip
        # the share's rounding and Skellam noise from a generator keyed by the release's keystream
        seed = np.empty(4, dtype=np.uint64)
        stream.fill(seed)
        rng = np.random.default_rng(seed)
        share = encode_share(clipped, self.privacy.distributed, round_seed(self.cfg, round_id), rng)
        log.debug("site %s round %d: %d patients sampled", self.site, round_id, sampled)
        return share, 1, float("nan")

    def _report_update(
        self, round_id: int, method: str, global_vec: np.ndarray, options: dict[str, Any]
    ) -> tuple[np.ndarray, int, float]:
        """The report model's local round (FedTAR's per-visit-index copies, or one pooled copy):
        the upload before the server's factor, the steps taken and the mean training loss."""
        cfg = self.cfg
        data, model = self._report()
        template = model.trainable_state()
        start = unflatten(torch.tensor(global_vec), template)
        t_max = cfg.data.max_visits
        visits = visit_groups(method, t_max)
        groups = [data.train] if visits is None else [data.train.at_visit(t) for t in visits]
        settings = LocalTrainSettings(
            lr=cfg.train.lr,
            epochs=cfg.train.local_epochs,
            batch_patients=cfg.train.batch_size,
            prox_mu=cfg.fed.fedprox_mu if method == "fedprox" else 0.0,
        )
        if method == "scaffold":
            server_c = unflatten(torch.tensor(np.asarray(options["control"])), template)
            local_c = self.scaffold_c or {n: torch.zeros_like(v) for n, v in template.items()}
            settings.grad_correction = {n: server_c[n] - local_c[n] for n in template}
        gradients = self.privacy.gradients(round_id) if self.privacy is not None else None
        result = train_copies(
            model, start, groups, settings, seed=cfg.seed * 7919 + round_id, gradients=gradients
        )
        start_vec = flatten(start)
        deltas = [flatten(s) - start_vec for s in result.states]
        # DP: weights must be public (post-processing of DP-SGD only), so every site counts once.
        scale = cfg.secagg.count_scale  # public: keeps n·Δ and n inside the SecAgg+ clip range
        weights = (
            [1.0 / scale] * len(deltas) if self.privacy is not None else [n / scale for n in result.rows]
        )
        parts = [
            torch.cat([w * d, torch.tensor([w], dtype=torch.float64)])
            for w, d in zip(weights, deltas, strict=True)
        ]
        if method == "scaffold":
            local_c = self.scaffold_c or {n: torch.zeros_like(v) for n, v in template.items()}
            steps = max(result.steps, 1)
            new_c = {
                n: local_c[n] - server_c[n] + (start[n] - result.states[0][n]) / (steps * cfg.train.lr)
                for n in template
            }
            control_delta = flatten(new_c) - flatten(local_c)
            self.scaffold_c = new_c
            parts.append(weights[0] * control_delta)
        return torch.cat(parts).numpy(), result.steps, result.mean_loss

    def finish(self, stopped_early: str | None = None, aborted: bool = False) -> dict[str, Any]:
        """End of run: close the site's audit log with a signed head record. Only after the last
        round (or a stated early stop): a log closed mid-run would leave later releases unlogged.
        An aborted run ends the log with `run_aborted` instead of `run_end`."""
        self.guard.check_end("finish", self.cfg.fed.rounds, stopped_early)
        self.guard.finished = stopped_early or ""
        self.guard.save()
        reply: dict[str, Any] = {"status": "ok"}
        if self.privacy is not None:
            # ε as this site's accountant holds it at the end (the last α release included), so the
            # server's console and metrics say what this site's log says
            reply.update(self.privacy.after_round_summary())
        if self.trail is not None:
            reply["audit_records"] = self.trail.take_pending()
            if aborted:
                self.trail.append("run_aborted", {"reason": stopped_early, "round": self.guard.last_round})
            else:
                self.trail.append("run_end", {"stopped_early": stopped_early})
            self.trail.close()
        return reply

    def _stash_upload(self, upload: np.ndarray) -> None:
        # read-only: what SecAgg+ fingerprinted at the setup is what it masks (no in-place change)
        upload.flags.writeable = False
        self.stash["upload"] = upload
        self.stash.pop("upload_fingerprint", None)

    def upload_fingerprint(self) -> str | None:
        """The stashed update's once-only fingerprint, made once per update (not twice a round)."""
        upload = self.stash.get("upload")
        if upload is None:
            return None
        # frozen wherever it is vouched for: over Flower the stash (this fingerprint included) is
        # rebuilt from the node's context.state for each message, with writeable arrays
        upload.flags.writeable = False
        if "upload_fingerprint" not in self.stash:
            self.stash["upload_fingerprint"] = upload_fingerprint(upload)
        return self.stash["upload_fingerprint"]

    # -- phase: hypergradient -----------------------------------------------------------------
    def hypergrad(
        self, round_id: int, final: np.ndarray, directions: np.ndarray, digest: str = ""
    ) -> dict[str, Any]:
        """α hypergradient scalars for a round this site trained, once (a retry of the same request
        gets the same values back). The directions are bounded: each per-patient scalar is clipped
        anyway, but a site does not evaluate its validation patients along arbitrary vectors."""
        final = self._check_state_vector(final, "the final state")
        directions = np.asarray(directions)
        limit = self.cfg.dp.alpha_direction_norm
        if (
            directions.shape != (self.cfg.data.max_visits, final.size)
            or not np.issubdtype(directions.dtype, np.floating)
            or not np.all(np.isfinite(directions))
            or np.linalg.norm(directions, axis=1).max() > limit
        ):
            raise Refusal(
                "bad_directions",
                f"α directions must be {self.cfg.data.max_visits} finite vectors of length {final.size} "
                f"with L2 norm ≤ {limit:g} (dp.alpha_direction_norm)",
            )
        if self.learner is not None or self.cfg.fed.method not in ALPHA_METHODS:
            # none were admitted or charged for this run's method: a release here would be uncharged
            raise Refusal("bad_request", f"{self.cfg.fed.method} releases no α scalars")
        if self.guard.check_alpha(round_id, digest) and "scalars" in self.stash:
            return {"status": "ok"}  # a retry: the scalars released before, no new noise
        reply = self._hypergrad(round_id, final, directions)
        self.stash["scalars_round"] = round_id
        self.guard.alpha_released(round_id, digest)
        self.guard.save()
        return reply

    def _hypergrad(self, round_id: int, final: np.ndarray, directions: np.ndarray) -> dict[str, Any]:
        data, model = self._report()
        if len(data.val) == 0:
            self.stash["scalars"] = np.zeros(directions.shape[0])
            return (
                {"status": "ok", "val_loss_sum": 0.0, "val_patients": 0}
                if self._losses_leave()
                else {"status": "ok"}
            )
        per_patient, losses = per_patient_hypergradients(
            model, torch.tensor(final), torch.tensor(directions), data.val
        )
        if self.privacy is not None:
            released = self.folder / f"alpha-r{round_id}.npy"
            if released.exists():
                scalars = np.load(released)
            else:
                scalars = self.privacy.release_alpha_scalars(per_patient.numpy(), round_id)
                save_release(released, scalars)
            self.stash["scalars"] = scalars
            return {"status": "ok"}
        self.stash["scalars"] = per_patient.sum(0).numpy()
        if not self._losses_leave():
            return {"status": "ok"}
        return {"status": "ok", "val_loss_sum": float(losses.sum()), "val_patients": int(losses.numel())}

    def _score_once(self) -> None:
        """The test split is scored once in the life of the site's data, not once per run: the
        server picks run ids, so a per-run rule is one exact scoring of its chosen weights per run.
        Kept beside the lifetime ledger, marked before the scores exist."""
        if self.lifetime is None or not self.deployed:
            return
        digest = self._test_digest()
        earlier = self.lifetime.scored.get(digest)
        if earlier is not None and earlier != self.run_id:
            raise Refusal(
                "test_split_scored",
                "this site's test split was scored in an earlier run; it is scored once for its patients",
            )
        self.lifetime.mark_scored(digest, self.run_id)
        from secure_fed.clients.lifetime import keep_anchor

        keep_anchor(self.cfg, self.lifetime, self.keys_dir)

    def _test_digest(self) -> str:
        """What identifies the test patients' data: their reports and images (report data), the
        site's records (imaging, whose learner holds the split)."""
        if self.learner is not None or self.data is None:
            assert self.lifetime is not None
            return self.lifetime.dataset
        test = self.data.test
        h = hashlib.sha256(f"secure_fed/test-split/v1|{self.site}|".encode())
        rows = sorted(
            hashlib.sha256(report.encode() + np.ascontiguousarray(image.numpy()).tobytes()).digest()
            for report, image in zip(test.reports, test.images, strict=True)
        )
        for row in rows:
            h.update(row)
        return h.hexdigest()

    def _losses_leave(self) -> bool:
        """Per-site losses and validation counts are neither DP nor summed securely: under DP or
        SecAgg+ they stay on the site (the server would otherwise see one site's figures)."""
        return self.privacy is None and not self.cfg.secagg_on

    # -- phase: evaluate ----------------------------------------------------------------------
    def evaluate(
        self, global_vec: np.ndarray, split: str = "test", stopped_early: str | None = None
    ) -> dict[str, Any]:
        """Corpus-level scores of the test split for the run's final model, once: the validation
        split is never scored for the server, and a second scoring would be an oracle on test data."""
        if split != "test":
            raise Refusal(
                "split_not_released", f"only the test split is scored for the server, not {split!r}"
            )
        global_vec = self._check_state_vector(global_vec, "the model to score")
        self.guard.check_end("evaluate", self.cfg.fed.rounds, stopped_early)
        self._score_once()
        self.guard.evaluated = True
        self.guard.save()
        if self.learner is not None:
            scores = self.learner.score(global_vec)
            return {"status": "ok", "weight": bucket_floor(self.learner.n_test), **scores}
        data, model = self._report()
        template = model.trainable_state()
        model.load_trainable_state(unflatten(torch.as_tensor(global_vec), template))
        examples = getattr(data, split)
        tokenizer = load_tokenizer(self.cfg.model.tokenizer_path, self.cfg.data.tokenizer)
        scores = evaluate_split(
            model,
            examples,
            tokenizer.decode,
            self.cfg.data.max_report_tokens + 1,
            free_text_labeler(self.cfg),
        )
        return {"status": "ok", "weight": bucket_floor(len(examples)), **scores}
