"""The report generator: frozen image encoder + GPT-2 decoder, shared LoRA, and an optional patient
head (FedTAR's hyper-LoRA, registered by its algorithm folder) conditioned on a profile q_p."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from secure_fed.model.lora import add_encoder_lora, add_shared_lora
from secure_fed.registry import model_head


@dataclass
class PatientContext:
    """Per-batch patient embedding φ (B, profile_dim), shared by every wrapped layer."""

    phi: torch.Tensor | None = None


def trim_padding(input_ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """The batch without its trailing all-padding columns. Reports are padded to the longest one
    allowed (57 tokens) while a batch's longest is about 42 (mean 27), and the decoder's cost grows
    with the columns. Each row's loss is unchanged: the decoder is causal, so no logit at a real
    token reads a later column, and padded targets are masked out of the loss."""
    if input_ids.is_meta:  # no values to trim by (the device test runs the model on "meta")
        return input_ids
    real = (input_ids != pad_id).any(0).nonzero()
    if real.numel() == 0:
        return input_ids
    return input_ids[:, : int(real.max()) + 1]


class ReportModel(nn.Module):
    """images (B, 2V, H, W) = [current, prior] per view → report tokens, personalised by q_p (B, K)."""

    def __init__(self, encoder: nn.Module, decoder: nn.Module, pad_id: int, bos_id: int, eos_id: int) -> None:
        super().__init__()
        self.encoder = encoder
        n_embd = int(decoder.config.n_embd)
        self.vis_proj = nn.Linear(int(encoder.out_dim), n_embd)
        self.decoder = decoder
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.ctx = PatientContext()
        self.proj: nn.Linear | None = None  # W_proj, b_proj: q_p → φ_p
        self.adapted_layers: list[str] = []
        self.base_digest = ""  # the frozen base weights' identity (build.weights_digest), set on build

    # -- structure ------------------------------------------------------------------------
    def add_adapters(
        self,
        lora_rank: int,
        lora_alpha: float,
        hyper: bool,
        gmm_components: int,
        profile_dim: int,
        hyper_rank: int,
    ) -> None:
        """Freeze the base, add the shared LoRA and (optionally) the patient hyper-LoRA."""
        for p in self.parameters():
            p.requires_grad_(False)
        add_shared_lora(self.decoder, lora_rank, lora_alpha)
        add_encoder_lora(self.encoder, lora_rank, lora_alpha)
        for name, p in self.named_parameters():
            p.requires_grad_("lora_" in name)
        if hyper:  # the head's own parameters are new, so trainable; it sets proj and ctx's use
            model_head("patient")(self, gmm_components, profile_dim, hyper_rank)

    def train(self, mode: bool = True) -> ReportModel:
        """Training mode for the adapters; the frozen base stays in eval mode.

        A frozen layer in training mode can still change what it computes: BatchNorm (the `paper`
        preset's CvT has it) normalises each row by the batch's statistics, which makes one
        patient's per-row gradient depend on the other patients' rows (per-patient DP clipping no
        longer bounds a patient) and writes private batch statistics into its running buffers.
        So every module whose weights (parameters or buffers) are all frozen is put back in eval
        mode. Parameter-free layers next to trainable ones (dropout) keep the requested mode.
        Before `add_adapters` everything is trainable and this is plain `nn.Module.train`.
        """
        super().train(mode)
        if mode:
            for module in self.modules():
                params = list(module.parameters())
                has_weights = bool(params) or any(True for _ in module.buffers())
                if has_weights and not any(p.requires_grad for p in params):
                    module.eval()
        return self

    @property
    def device(self) -> torch.device:
        """Where the model was put (secure_fed.model.device decides); inputs are moved here."""
        return next(self.parameters()).device

    def trainable_state(self) -> OrderedDict[str, torch.Tensor]:
        """A CPU copy of the adapters: states are flattened, summed and sent from the CPU."""
        return OrderedDict(
            (n, p.detach().to("cpu", copy=True)) for n, p in self.named_parameters() if p.requires_grad
        )

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        params = dict(self.named_parameters())
        with torch.no_grad():
            for name, value in state.items():
                params[name].copy_(value)

    # -- forward --------------------------------------------------------------------------
    def visual_tokens(self, images: torch.Tensor) -> torch.Tensor:
        # Each view (a [current, prior] channel pair) goes through the same encoder and the decoder
        # attends to all views' tokens at once, as R2Gen reads IU-Xray's frontal and lateral views.
        views = images.split(2, dim=1)
        return self.vis_proj(torch.cat([self.encoder(view) for view in views], dim=1))

    def forward(self, images: torch.Tensor, input_ids: torch.Tensor, profiles: torch.Tensor) -> torch.Tensor:
        """Per-row mean token cross-entropy (B,): callers sum it for per-patient DP gradients."""
        input_ids = trim_padding(input_ids.to(self.device), self.pad_id)
        logits = self.logits(images, input_ids, profiles)
        targets = input_ids[:, 1:]
        mask = (targets != self.pad_id).float()
        nll = F.cross_entropy(logits[:, :-1].transpose(1, 2), targets, reduction="none")
        return (nll * mask).sum(1) / mask.sum(1).clamp_min(1.0)

    def logits(self, images: torch.Tensor, input_ids: torch.Tensor, profiles: torch.Tensor) -> torch.Tensor:
        device = self.device
        images, input_ids, profiles = images.to(device), input_ids.to(device), profiles.to(device)
        visual = self.visual_tokens(images)
        self.ctx.phi = self.proj(profiles) if self.proj is not None else None
        try:
            attn = (input_ids != self.pad_id).long()
            return self.decoder(input_ids=input_ids, attention_mask=attn, encoder_hidden_states=visual).logits
        finally:
            self.ctx.phi = None

    @torch.no_grad()
    def generate(self, images: torch.Tensor, profiles: torch.Tensor, max_len: int) -> list[list[int]]:
        """Greedy decoding with a key/value cache: each step feeds only the newest token, and the
        cross-attention keys/values of the visual tokens are computed once. Its token ids equal
        those of recomputing the whole prefix each step (tests/model/test_generate_cache.py); with
        64 visual tokens and reports up to 57 tokens the cache is the cheaper of the two
        (benchmarks/hospital_cost.py's ``decode`` figures). Rows that emitted EOS get pad after it."""
        was_training = self.training
        self.eval()
        images, profiles = images.to(self.device), profiles.to(self.device)
        batch = images.shape[0]
        nxt = torch.full((batch,), self.bos_id, dtype=torch.long, device=images.device)
        done = torch.zeros(batch, dtype=torch.bool, device=images.device)
        visual = self.visual_tokens(images)
        # φ is per row and constant over the sequence, so the cached keys/values (computed under
        # the same φ) stay valid: every step sets it again for the layers that run.
        phi = self.proj(profiles) if self.proj is not None else None
        cache = None
        out: list[torch.Tensor] = []
        try:
            for _ in range(max_len):
                self.ctx.phi = phi
                step = self.decoder(
                    input_ids=nxt[:, None], encoder_hidden_states=visual, cache=cache, use_cache=True
                )
                cache = step.cache
                nxt = step.logits[:, -1].argmax(-1)
                nxt = torch.where(done, torch.full_like(nxt, self.pad_id), nxt)
                out.append(nxt)
                done |= nxt == self.eos_id
                if bool(done.all()):
                    break
        finally:
            self.ctx.phi = None
            self.train(was_training)
        if not out:
            return [[] for _ in range(batch)]
        return torch.stack(out, dim=1).tolist()
