"""Assemble a ReportModel from the config: base (cached pretraining for offline presets) + adapters."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path

import torch

from secure_fed.config import ModelConfig
from secure_fed.model.decoder import build_decoder
from secure_fed.model.encoder import build_encoder
from secure_fed.model.presets import PRESETS
from secure_fed.model.report_model import ReportModel

log = logging.getLogger(__name__)

# Bump when the base architecture or pretraining recipe changes, so stale caches are not reused.
# 3: pretrained on the public domain cohort (a mixed archive), not a site twin; 4: the key names the
# pretraining data's recipe (a base pretrained on 48-token reports was loaded for 56-token runs);
# 5: pretrained on one torch thread (pretrain_base), whatever the run's thread count
_BASE_VERSION = 5

# Bases shipped with the package, by their cache file's name (the same key). Machines of the same
# kind pretrain different bases from one recipe (float reductions over 2,000 steps), and every
# figure depends on its base: a shipped base is the same on every machine, so figures measured on
# two machines can be set side by side.
SHIPPED_BASES = Path(__file__).parent / "bases"


def build_base(
    cfg: ModelConfig,
    vocab_size: int,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    image_size: int,
    seed: int = 0,
    min_positions: int = 0,
) -> ReportModel:
    """``min_positions``: bos + the longest report + eos; a preset with fewer positions gets more
    (real reports are longer than the synthetic ones the presets were sized for)."""
    preset = PRESETS[cfg.preset]
    encoder_name = cfg.encoder or preset.encoder
    if not encoder_name:
        raise ValueError(
            f"model.preset = {cfg.preset!r} needs model.encoder (a local CvT path or a timm name)"
        )
    if cfg.preset == "paper" and cfg.decoder_path is None:
        raise ValueError("model.preset = 'paper' needs model.decoder_path (a local DistilGPT2 checkpoint)")
    torch.manual_seed(seed)
    encoder = build_encoder(encoder_name, in_chans=2, img_size=image_size, **preset.encoder_kwargs)
    decoder = build_decoder(
        vocab_size,
        preset.n_embd,
        preset.n_layer,
        preset.n_head,
        max(preset.n_positions, min_positions),
        bos_id,
        eos_id,
        pad_id,
        cfg.decoder_path,
    )
    return ReportModel(encoder, decoder, pad_id=pad_id, bos_id=bos_id, eos_id=eos_id)


def base_cache_path(
    cfg: ModelConfig, vocab_size: int, image_size: int, seed: int, min_positions: int = 0, recipe: str = ""
) -> Path:
    """`recipe` names what the base is pretrained on (the public data and its encoding): a base
    pretrained on other data must not be loaded."""
    key = json.dumps(
        {
            "v": _BASE_VERSION,
            "recipe": recipe,
            "preset": cfg.preset,
            # the architecture itself, not just its name: a preset whose sizes change must not
            # load a cached base of the old shape
            "architecture": dataclasses.asdict(PRESETS[cfg.preset]),
            "encoder": cfg.encoder,
            "vocab": vocab_size,
            "image": image_size,
            "steps": cfg.pretrain_steps,
            "seed": seed,
            **({"positions": min_positions} if min_positions > PRESETS[cfg.preset].n_positions else {}),
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return Path(cfg.cache_dir) / f"base-{cfg.preset}-{digest}.pt"


def weights_digest(state: dict[str, torch.Tensor]) -> str:
    """The weights' identity: two bases pretrained from the same recipe on machines of the same
    kind can differ (float reductions), and figures from different bases are not comparable."""
    h = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        h.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        h.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def build_model(
    cfg: ModelConfig,
    vocab_size: int,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    image_size: int,
    pretrain: Callable[[ReportModel], None] | None = None,
    adapter_seed: int = 0,
    min_positions: int = 0,
    recipe: str = "",
    visit_slots: int = 0,
) -> ReportModel:
    """Base weights are identical at every site: built from a fixed seed, pretrained on public
    synthetic data once, cached, then frozen under the adapters."""
    seed = 0  # the base is public and identical for every run and site
    model = build_base(cfg, vocab_size, pad_id, bos_id, eos_id, image_size, seed, min_positions)
    local_checkpoints = cfg.decoder_path is not None
    if pretrain is not None and not local_checkpoints and cfg.pretrain_steps > 0:
        path = base_cache_path(cfg, vocab_size, image_size, seed, min_positions, recipe)
        shipped = SHIPPED_BASES / path.name
        if shipped.is_file():  # before the cache: a machine's own pretraining is another base
            model.load_state_dict(torch.load(shipped, map_location="cpu", weights_only=True))
        elif path.exists():
            model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        else:
            log.info(
                "pretraining the %s base on the public synthetic cohort (cached at %s)", cfg.preset, path
            )
            pretrain(model)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            torch.save(model.state_dict(), tmp)
            tmp.replace(path)
    model.base_digest = weights_digest(model.state_dict())
    torch.manual_seed(adapter_seed + 1)
    # the hyper-LoRA's input: q_p, and with `visit_slots` the visit index one-hot after it
    model.add_adapters(
        cfg.lora_rank,
        cfg.lora_alpha,
        cfg.hyper_lora,
        cfg.gmm_components + visit_slots,
        cfg.profile_dim,
        cfg.hyper_rank,
    )
    return model
