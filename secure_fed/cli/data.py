"""`secure-fed data`: make a synthetic cohort or benchmark, check a cohort."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from secure_fed.cli.common import (
    Commands,
    console,
    fail,
    read_config,
)

data_app = typer.Typer(cls=Commands, no_args_is_help=True, help="Make or check cohorts.")


@data_app.command("synth")
def data_synth(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="folder for manifest.jsonl, labels.jsonl, images/")
    ],
    sites: Annotated[int, typer.Option(min=1, max=64)] = 3,
    patients: Annotated[int, typer.Option(min=1, help="patients per site")] = 60,
    visits: Annotated[int, typer.Option(min=1, max=16, help="maximum visits per patient")] = 5,
    seed: int = 0,
    image_size: Annotated[int, typer.Option(min=16, max=256)] = 32,
    kind: Annotated[
        str, typer.Option(help="reports (longitudinal cohort) or multimodal (FM2's imaging benchmark)")
    ] = "reports",
    per_class: Annotated[int, typer.Option(min=4, help="multimodal: images per (modality, class)")] = 40,
    split: Annotated[str, typer.Option(help="multimodal: overlapped (Dirichlet label skew) or disjoint")] = (
        "overlapped"
    ),
    phi: Annotated[
        float, typer.Option(min=0.001, help="multimodal: Dirichlet φ of the overlapped split")
    ] = 0.3,
) -> None:
    """Make a synthetic longitudinal cohort, or FM2's multi-modality imaging benchmark dealt to sites.

    Example: secure-fed data synth --out data/synth --sites 3
    Example: secure-fed data synth --kind multimodal --out data/mm --sites 4 --phi 0.1
    """
    if kind not in ("reports", "multimodal"):
        fail(f"--kind {kind}: choose reports or multimodal")
    if kind == "multimodal":
        from secure_fed.data.multimodal import synthesize_sited

        if split not in ("overlapped", "disjoint"):
            fail(f"--split {split}: choose overlapped or disjoint")
        try:
            manifest, counts = synthesize_sited(out, sites, per_class, split, phi, image_size, seed)
        except OSError as err:
            fail(f"--out {out}: cannot write the benchmark ({err.strerror}); choose a writable folder")
            raise
        except ValueError as err:
            fail(f"--sites {sites}: {err}")
            raise
        console.print(
            f"wrote {manifest} ({sum(counts.values())} images: "
            + ", ".join(f"{s} {n}" for s, n in counts.items())
            + ")"
        )
        return
    from secure_fed.data.synthetic import synthesize

    try:
        manifest = synthesize(
            out, sites=sites, patients=patients, visits=visits, seed=seed, image_size=image_size
        )
    except OSError as err:
        fail(f"--out {out}: cannot write the cohort ({err.strerror}); choose a writable folder")
        raise
    console.print(f"wrote {manifest} ({sum(1 for _ in manifest.open())} visits)")


@data_app.command("check")
def data_check(
    path: Annotated[Path, typer.Argument(help="manifest.jsonl, annotation.json or a folder")],
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="run TOML whose data.val_fraction, data.test_fraction apply"),
    ] = None,
) -> None:
    """Validate a manifest: fields, images, visit dates in order, sites large enough to split.

    Prints every problem as file:line: field: problem (or file: field: problem), exits 2 if any.
    Example: secure-fed data check data/synth/manifest.jsonl
    """
    from secure_fed.data.cohort import check_main

    data = read_config(config, {}).data
    raise typer.Exit(check_main(path, data.val_fraction, data.test_fraction))
