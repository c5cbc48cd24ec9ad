"""What protects a site's updates and proves the run: SecAgg+, CKKS, the signed logs, the approved code."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from secure_fed.config.base import _Strict


class SecAggConfig(_Strict):
    enabled: bool | None = Field(None, description="None = on exactly when DP is on")
    neighbours: int | None = Field(None, ge=2, description="k of the k-regular graph; None = log-scale")
    threshold: float = Field(0.6, gt=0.5, le=1.0, description="fraction of neighbours to unmask")
    clip: float = Field(1.0, gt=0, description="values are clipped to [-clip, clip] before encoding")
    bits: int | None = Field(
        None,
        ge=8,
        le=40,
        description="2^bits quantisation steps per clip (step = clip / 2^bits); None = the most, up "
        "to 30, that keep the ring in 32-bit words for the round's site count (29 bits for 3 sites, "
        "27 for 10)",
    )
    count_scale: float = Field(
        1024.0,
        gt=0,
        description="uploads carry n / count_scale (public), keeping weighted updates within clip",
    )


class HEConfig(_Strict):
    enabled: bool = False
    keys_dir: Path | None = None
    poly_modulus_degree: int = 8192
    coeff_mod_bit_sizes: list[int] = [60, 40, 40, 60]
    scale_bits: int = Field(40, ge=20, le=60)


class AuditConfig(_Strict):
    enabled: bool = True
    keys_dir: Path | None = Field(None, description="Ed25519 keys; None = ephemeral keys in out/")


class DeployConfig(_Strict):
    approved_fabs: Path | None = Field(
        None,
        description="a deployed site's list of approved FAB SHA-256s (`secure-fed code approve` writes it); "
        "its node runs only runs of these FABs, with the site's own installed code",
    )
