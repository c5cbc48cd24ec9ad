"""GPT-2-family report decoder with cross-attention to the visual tokens."""

from __future__ import annotations

from pathlib import Path

from transformers import GPT2Config, GPT2LMHeadModel


def build_decoder(
    vocab_size: int,
    n_embd: int,
    n_layer: int,
    n_head: int,
    n_positions: int,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    local_path: Path | None = None,
) -> GPT2LMHeadModel:
    if local_path is not None:
        # e.g. DistilGPT2 retrained on clinical text; cross-attention is added fresh if absent.
        model = GPT2LMHeadModel.from_pretrained(
            str(local_path), local_files_only=True, add_cross_attention=True, attn_implementation="eager"
        )
        model.resize_token_embeddings(vocab_size)
        return model
    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        add_cross_attention=True,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    # Eager attention: the α hypergradient differentiates a backward pass, and torch has no
    # derivative for SDPA's fused CPU backward.
    config._attn_implementation = "eager"
    return GPT2LMHeadModel(config)
