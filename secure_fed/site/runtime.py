"""Everything one site does in a round, independent of how messages travel."""

from __future__ import annotations

import hashlib
import io
import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from secure_fed.config import RunConfig
from secure_fed.crypto.secagg_client import upload_fingerprint
from secure_fed.crypto.secagg_identity import SecAggIdentity, load_identity
from secure_fed.dp.accountants import RDP
from secure_fed.dp.private_files import atomic_write_bytes, load_or_create_noise_key
from secure_fed.dp.site_ledger import SiteLedger
from secure_fed.registry import learner_factory
from secure_fed.site.coarsen import bucket_floor, public_count
from secure_fed.site.factors import Factors, check_factors
from secure_fed.site.guard import Refusal, SiteFault, SiteGuard
from secure_fed.site.lifetime import keep_anchor, log_lifetime_start, open_lifetime
from secure_fed.site.private import SitePrivacy
from secure_fed.site.trail import SiteTrail

if TYPE_CHECKING:
    from secure_fed.site.learner import Learner

log = logging.getLogger(__name__)


def save_release(path: Path, values: np.ndarray) -> None:
    """A released value, written so that a crash leaves the old file or the new one, never a torn
    one a restarted site would misread as "nothing released yet" and then release again."""
    buffer = io.BytesIO()
    np.save(buffer, values)
    atomic_write_bytes(path, buffer.getvalue())


def _load_layers(path: Path) -> list[bytes]:
    """The layer seeds kept with a saved release; none where none were kept (a release saved before
    layers existed, or a lost file): then nothing is revealed and the whole share stays in the sum."""
    from secure_fed.dp.distributed import SEED_BYTES

    raw = path.read_bytes() if path.exists() else b""
    if len(raw) % SEED_BYTES:
        return []
    return [raw[i : i + SEED_BYTES] for i in range(0, len(raw), SEED_BYTES)]


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
    store = open_lifetime(cfg, site, keys_dir)
    if store is None:
        return None
    if privacy is not None:
        store.attach(run_id, privacy.ledger)
        log_lifetime_start(trail, folder, site, privacy, store, run_id)
    keep_anchor(cfg, store, keys_dir)
    return store


@dataclass
class SiteRuntime:
    """One site: its guard, budget, releases and audit trail around an algorithm's learner
    (`clients.learner.Learner`, registered for the run's `data.kind` in `secure_fed.registry`)."""

    cfg: RunConfig
    site: str
    learner: Learner
    privacy: SitePrivacy | None
    stash: dict[str, Any] = field(default_factory=dict)

    trail: SiteTrail | None = None
    keys_dir: Path | None = None  # the site's provisioned keys: its signing key, peers' public keys
    run_id: str = ""
    # the site's persistent ledger (every run's releases, the test splits scored): `[dp] ledger_dir`
    lifetime: SiteLedger | None = None
    # a hospital's own node facing a server it does not control (launch/client_app.py sets it): its test
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
        trains: bool = True,
    ) -> SiteRuntime:
        """`trains=False`: a runtime that only scores a model trained elsewhere (a sweep's
        references): with distributed DP it plans no noise share, so it needs no SecAgg+ keys; its
        DP setup (the GMM's histogram σ included) is the run's own."""
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
        from secure_fed.site.learner import SiteStart

        learner = learner_factory(cfg.data.kind)(cfg, site, folder, site_key)
        privacy = _site_privacy(
            cfg,
            site,
            folder,
            trail,
            learner.n_train,
            learner.n_val,
            learner.passes(cfg.fed.method),
            learner.releases_alpha(cfg.fed.method),
        )
        lifetime = _join_lifetime(cfg, site, folder, keys_dir, run_id, privacy, trail)
        learner.start(SiteStart(site, folder, run_id, privacy, lifetime, trail))
        if trail is not None:  # exact sizes for the site's auditors; never in a record the server copies
            trail.append(
                "population_sizes",
                {"train": learner.n_train, "validation": learner.n_val, "test": learner.n_test},
            )
        runtime = cls(
            cfg=cfg,
            site=site,
            learner=learner,
            privacy=privacy,
            trail=trail,
            keys_dir=keys_dir,
            run_id=run_id,
            lifetime=lifetime,
        )
        if privacy is not None and cfg.dp.noise == "distributed" and trains:
            runtime._plan_distributed()
        return runtime

    def _plan_distributed(self) -> None:
        """The run's distributed plan, from this site's own config, the model's size and the sites
        it holds keys for (never from the server)."""
        from secure_fed.crypto.secagg_protocol import SecAggSettings, neighbourhood_size
        from secure_fed.dp.distributed import check_honest_min, plan_for

        assert self.privacy is not None
        sites = self._provisioned_sites()
        if sites is None:
            raise Refusal("no_keys", "dp.noise = 'distributed' needs the sites' provisioned keys (SecAgg+)")
        seen = neighbourhood_size(len(sites), SecAggSettings.from_config(self.cfg.secagg))
        check_honest_min(self.cfg, len(sites), seen)
        plan = plan_for(self.cfg, self.learner.distributed_dim(self.cfg.fed.method), len(sites))
        # its privacy records carry the mode, h, c and the plan, in the site's signed log
        self.privacy.set_distributed(plan)

    def log_instruction(
        self, phase: str, round_id: Any, digest: str, outcome: str, code: str | None, detail: str | None
    ) -> None:
        """Every server instruction, acted on or not, in the site's own signed log: phase, round,
        digest, outcome and code. The detail (an exception's or a refusal's own words) goes to the
        site's unsigned `debug.log` only: it may name local files or hosts, and a signed record is
        handed to auditors and can never be edited."""
        round_no = round_id if isinstance(round_id, int) and not isinstance(round_id, bool) else None
        if detail:
            self.debug_log(
                {"phase": phase, "round": round_no, "outcome": outcome, "code": code, "detail": detail}
            )
        if self.trail is None or self.trail.log.closed:
            return
        payload = {"phase": phase, "round": round_no, "digest": digest, "outcome": outcome, "code": code}
        self.trail.append("instruction", payload, round_no)

    @property
    def debug_log_path(self) -> Path:
        """The site's unsigned debug log, in its private folder (never sent, never signed)."""
        return self.folder / "debug.log"

    def debug_log(self, entry: dict[str, Any]) -> None:
        line = json.dumps({"time": datetime.now(UTC).isoformat(), **entry}, default=str)
        try:
            with self.debug_log_path.open("a", encoding="utf-8") as out:
                out.write(line + "\n")
        except OSError:  # a debug line lost must not fail the instruction it describes
            log.warning("could not write the site's debug log", exc_info=True)

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
        dim = self.learner.dim()
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
        if self.privacy is not None and self.privacy.distributed is not None and method != cfg.fed.method:
            # the plan (ring, noise, the step's length) is this site's, for its own method
            raise Refusal(
                "bad_request", f"dp.noise = 'distributed' was planned for {cfg.fed.method}, not {method}"
            )
        release_options: dict[str, Any] = {}
        if self.privacy is not None and self.privacy.distributed is not None:
            try:  # before the round is admitted: a malformed instruction is refused uncharged
                release_options = self.learner.distributed_options(method, options)
            except ValueError as err:
                raise Refusal("bad_request", f"the training instruction's release input: {err}") from None
        self.guard.check_training(round_id)
        self.guard.save()
        released = self.folder / f"release-r{round_id}.npy"
        if self.privacy is not None:
            if self.privacy.already_released(round_id) and released.exists():
                return self._resend_release(round_id, released, global_vec)
            if self.privacy.already_released(round_id):
                return self._release_lost(round_id)
            declined = self._admit(round_id)
            if declined is not None:
                return declined
        upload, steps, mean_loss, layers = self._fresh_upload(
            round_id, method, global_vec, options, factors, release_options
        )
        self._stash_upload(upload)
        self.stash["secagg_context"] = factors.digest
        self.stash["secagg_members"] = list(factors.sites)
        self.stash["upload_round"] = round_id
        noised = self._current_plan()
        self._stash_plan(noised)
        self._stash_layers(layers)
        if self.privacy is not None:
            self._keep_release(released, factors, noised, layers, upload)
        self.guard.trained_round(round_id)
        self._keep_trained_from(round_id, global_vec)
        self.guard.save()
        reply: dict[str, Any] = {
            "status": "ok",
            "dim": int(upload.size),
            "steps": steps,
            "train_loss": mean_loss if self._losses_leave() else float("nan"),
        }
        if self.privacy is not None:
            reply.update(self.privacy.after_round_summary())
            reply.update(self._distributed_reply(noised))
        if self.trail is not None:
            reply["audit_records"] = self.trail.take_pending()
        return reply

    def _resend_release(self, round_id: int, released: Path, global_vec: np.ndarray) -> dict[str, Any]:
        """A retried round (after a crash) re-sends the very values released before: nothing new
        is disclosed and the ledger charges the round once."""
        assert self.privacy is not None
        noised = self._release_plan(round_id, released)
        self._stash_upload(np.load(released))
        context = released.with_suffix(".factors")
        self.stash["secagg_context"] = context.read_bytes() if context.exists() else b""
        members = released.with_suffix(".factor-sites")
        self.stash["secagg_members"] = json.loads(members.read_text()) if members.exists() else []
        self.stash["upload_round"] = round_id
        self._stash_plan(noised)
        self._stash_layers(_load_layers(released.with_suffix(".layers")))
        self.guard.trained_round(round_id)
        self._keep_trained_from(round_id, global_vec)
        self.guard.save()
        return {
            "status": "ok",
            "dim": int(self.stash["upload"].size),
            "steps": 0,
            "train_loss": float("nan"),
            **self.privacy.after_round_summary(),
            **self._distributed_reply(noised),
        }

    def _release_lost(self, round_id: int) -> dict[str, Any]:
        """Charged before a restart but its release is gone: sitting the round out is the only
        answer that neither releases twice nor charges twice."""
        assert self.privacy is not None
        return {
            "status": "declined",
            "code": "release_lost",
            "population": "train",
            "budget": self.privacy.budget,
            "would_be_epsilon": self.privacy.after_round_summary()["epsilon_rdp"],
            "accountant": RDP.name,
            "reason": f"round {round_id} was charged before a restart but its release was lost; "
            "sitting it out rather than releasing twice",
        }

    def _admit(self, round_id: int) -> dict[str, Any] | None:
        """None when the site's budget admits the round (now charged); else the signed refusal's
        declined reply, with nothing left to upload."""
        assert self.privacy is not None
        try:
            admission = self.privacy.admit_round(round_id)
        except ValueError as err:  # the site's own ledger or guard, not anything the server sent
            raise SiteFault(f"the site's privacy accounting failed at round {round_id}: {err}") from err
        if not admission.ok:
            self.stash.pop("upload", None)
            if self.trail is not None:
                self.trail.append(
                    "budget_refusal",
                    {
                        "site": self.site,
                        "population": self.privacy.refused_population,
                        "epsilon_after": admission.would_be_epsilon,
                        "accountant": self.privacy.refused_accountant,
                        "budget": self.privacy.budget,
                        "reason": admission.reason,
                    },
                    round_id,
                )
            return {
                "status": "declined",
                "code": "budget",
                "reason": admission.reason,
                "would_be_epsilon": admission.would_be_epsilon,
                "accountant": self.privacy.refused_accountant or RDP.name,
                "budget": self.privacy.budget,
                "population": self.privacy.refused_population or "",
            }
        return None

    def _fresh_upload(
        self,
        round_id: int,
        method: str,
        global_vec: np.ndarray,
        options: dict[str, Any],
        factors: Factors,
        release_options: dict[str, Any],
    ) -> tuple[np.ndarray, int, float, list[bytes]]:
        """This round's upload, its steps and mean loss, and the seeds of its removable noise layers."""
        scaled = "factors" in options or "factor_sites" in options
        if self.privacy is not None and self.privacy.distributed is not None:
            if scaled:
                # a factor would weigh this site's noise share, not only its patients' gradients
                raise Refusal("bad_request", "dp.noise = 'distributed' takes no server-chosen factors")
            upload, steps, mean_loss = self.learner.distributed_update(
                round_id, method, global_vec, self.privacy, release_options
            )
            layers = self.privacy.take_layers(round_id)
        else:
            layers = []
            gradients = (lambda: self.privacy.gradients(round_id)) if self.privacy is not None else None
            update = self.learner.local_update(round_id, method, global_vec, gradients, options)
            upload, steps, mean_loss = update.upload * factors.own, update.steps, update.mean_loss
        return upload, steps, mean_loss, layers

    def _keep_release(
        self, released: Path, factors: Factors, noised: str | None, layers: list[bytes], upload: np.ndarray
    ) -> None:
        """Keep what a retried round must re-send: the release and what it was made under."""
        # the factors and the plan first: a retry re-sends the release under the vector it was
        # made with, and only under the plan it was noised for
        atomic_write_bytes(released.with_suffix(".factors"), factors.digest)
        sites = json.dumps(list(factors.sites)).encode()
        atomic_write_bytes(released.with_suffix(".factor-sites"), sites)
        if noised is not None:
            atomic_write_bytes(released.with_suffix(".plan"), noised.encode())
            # a retried round re-sends this share: with it the seeds of its removable layers
            atomic_write_bytes(released.with_suffix(".layers"), b"".join(layers))
        save_release(released, upload)

    def _current_plan(self) -> str | None:
        """The digest of the distributed-DP plan this site holds now (None: no distributed DP)."""
        if self.privacy is None or self.privacy.distributed is None:
            return None
        from secure_fed.dp.distributed.run import plan_digest

        return plan_digest(self.privacy.distributed)

    def _release_plan(self, round_id: int, released: Path) -> str | None:
        """The plan a saved release was noised for, which must be the plan the site holds now: the
        server decodes, and the other sites' shares are sized, by the plan of the round's sum."""
        current = self._current_plan()
        if current is None:
            return None
        kept = released.with_suffix(".plan")
        noised = kept.read_text().strip() if kept.exists() else ""
        if noised != current:
            self.stash.pop("upload", None)
            was = f"distributed-DP plan {noised[:12]}" if noised else "a plan it kept no record of"
            raise Refusal(
                "plan_changed",
                f"round {round_id}'s release was noised under {was}, but this site now plans "
                f"{current[:12]}: it is not sent under another plan (run the site with the policy and "
                "keys it had for this run, or start a new run)",
            )
        return noised

    def _stash_layers(self, seeds: list[bytes]) -> None:
        """The seeds of the stashed share's removable noise layers, as one uint8 array (L × 32: the
        wire codec carries arrays): revealed at the unmask, those the confirmed survivors free."""
        from secure_fed.dp.distributed import SEED_BYTES

        self.stash["noise_layers"] = (
            np.frombuffer(b"".join(seeds), dtype=np.uint8).reshape(-1, SEED_BYTES).copy()
        )

    def _stash_plan(self, noised: str | None) -> None:
        if noised is None:
            self.stash.pop("upload_plan", None)
        else:
            self.stash["upload_plan"] = noised

    def _distributed_reply(self, noised: str | None) -> dict[str, Any]:
        if noised is None:
            return {}
        assert self.privacy is not None
        return {
            # the patient count its operator declares public (never one derived from n, which
            # would be released without noise): the server's divisor, q × Σ declared counts
            "public_patients": public_count(self.cfg, self.site) or 1,
            # which plan the share was encoded with: a server on another plan would decode noise
            "distributed_plan": noised,
        }

    @property
    def _trained_from_path(self) -> Path:
        return self.folder / "trained-from.npy"

    def _keep_trained_from(self, round_id: int, global_vec: np.ndarray) -> None:
        """A deployed site scores its test split only with the global state it last trained from:
        weights the server sends for the scoring alone could be made to probe the test patients."""
        if not self.deployed:
            return
        save_release(self._trained_from_path, global_vec)
        digest = hashlib.sha256(np.ascontiguousarray(global_vec).tobytes()).hexdigest()
        self.guard.trained_from = {"round": round_id, "sha256": digest}

    def _scored_weights(self, sent: np.ndarray) -> tuple[np.ndarray, str | None]:
        """The weights to score and, for a deployed site, which global they are."""
        if not self.deployed:
            return sent, None
        kept = self.guard.trained_from
        path = self._trained_from_path
        vec = np.load(path) if kept and path.exists() else None
        if vec is None or hashlib.sha256(np.ascontiguousarray(vec).tobytes()).hexdigest() != kept["sha256"]:
            raise Refusal("evaluate_untrained", "this site keeps no global state it trained from in this run")
        return vec, f"global of round {kept['round']}"

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
        if not self.learner.releases_alpha(self.cfg.fed.method):
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
        if self.learner.n_val == 0:
            self.stash["scalars"] = np.zeros(directions.shape[0])
            return (
                {"status": "ok", "val_loss_sum": 0.0, "val_patients": 0}
                if self._losses_leave()
                else {"status": "ok"}
            )
        per_patient, losses = self.learner.hypergradients(final, directions)
        if self.privacy is not None and self.privacy.alpha_shared:
            # no noise yet: the share is sized for the participants the CKKS round verifies
            # (`site.alpha_shares.draw_share`), drawn once; the un-noised sum stays in the site's
            # memory, and a retry recomputes the same sum, drawing nothing
            self.stash["scalars"] = self.privacy.clipped_alpha_sum(per_patient.numpy())
            return {"status": "ok"}
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
        """The test split is scored once in the life of the site, not once per run: the server
        picks run ids, so a per-run rule is one exact scoring of its chosen weights per run. Kept
        beside the lifetime ledger under the site's name, as the ledger is: a digest of the test
        rows would be a new key after a re-split, a refresh or one added row, for the same patients.
        Marked before the scores exist."""
        if self.lifetime is None or not self.deployed:
            return
        # any entry is this site's: ledgers before this rule keyed it by a digest of the test rows
        if any(run != self.run_id for run in self.lifetime.scored.values()):
            raise Refusal(
                "test_split_scored",
                "this site's test split was scored in an earlier run; it is scored once for its patients",
            )
        self.lifetime.mark_scored(self.site, self.run_id)
        keep_anchor(self.cfg, self.lifetime, self.keys_dir)

    def _losses_leave(self) -> bool:
        """Per-site losses and validation counts are neither DP nor summed securely: under DP or
        SecAgg+ they stay on the site (the server would otherwise see one site's figures)."""
        return self.privacy is None and not self.cfg.secagg_on

    # -- phase: evaluate ----------------------------------------------------------------------
    def evaluate(
        self, global_vec: np.ndarray, split: str = "test", stopped_early: str | None = None
    ) -> dict[str, Any]:
        """Corpus-level scores of the test split for the run's final model, once: the validation
        split is never scored for the server, and a second scoring would be an oracle on test data.
        A deployed site scores the global state of the last training message it acted on, whatever
        `global_vec` holds: it never sees the aggregate after its last round, so that is the last
        model it can tell the server did not make up for the scoring."""
        if split != "test":
            raise Refusal(
                "split_not_released", f"only the test split is scored for the server, not {split!r}"
            )
        global_vec = self._check_state_vector(global_vec, "the model to score")
        self.guard.check_end("evaluate", self.cfg.fed.rounds, stopped_early)
        weights, which = self._scored_weights(global_vec)
        self._score_once()
        self.guard.evaluated = True
        self.guard.save()
        scores = self.learner.score(weights)
        reply = {"status": "ok", "weight": bucket_floor(self.learner.n_test), **scores}
        if which is not None:  # a deployed site says which model its scores are for
            reply["scored"] = which
        return reply
