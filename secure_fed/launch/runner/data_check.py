"""Refusing, before anything slow, data that would stop a run midway."""

from __future__ import annotations

from pathlib import Path

from secure_fed.config import RunConfig


def preflight(cfg: RunConfig) -> None:
    """Refuse, before anything slow, data that would stop the run midway (one message per problem).

    Raises ``DataValidationError`` whose problems each name the file or configuration key and the fix.
    """
    from secure_fed.data.cohort import cohort_problems, min_patients
    from secure_fed.data.manifest import DataValidationError

    d = cfg.data
    if d.kind == "imaging":
        from secure_fed.data.multimodal import imaging_split

        try:
            _, split = imaging_split(cfg)  # validates a manifest: file:line problems
        except DataValidationError:
            raise
        except ValueError as err:
            raise DataValidationError([f"data.imaging: {err}; change data.imaging.sites or .split"]) from None
        small = sorted(s for s, ix in split.sites.items() if len(ix) < 4)
        if small:
            raise DataValidationError(
                [
                    f"data.imaging: site(s) {', '.join(small)} hold fewer than 4 images, too few to split "
                    "train/test; use fewer sites or more images (data.imaging.per_class)"
                ]
            )
        return
    if d.source == "synthetic":
        need = min_patients(d.val_fraction, d.test_fraction)
        if d.synth.patients < need and d.synth.site_patients is None:
            raise DataValidationError(
                [
                    f"data.synth.patients: {d.synth.patients} patient(s) per site cannot fill train,"
                    f" validation and test (at least {need} needed); raise data.synth.patients"
                ]
            )
        if d.synth.site_patients is not None and min(d.synth.site_patients) < need:
            raise DataValidationError(
                [
                    f"data.synth.site_patients: a site of {min(d.synth.site_patients)} patient(s) cannot"
                    f" fill train, validation and test (at least {need} needed); raise its size"
                ]
            )
        return
    assert d.path is not None
    if not Path(d.path).exists():
        raise DataValidationError(
            [
                f"data.path: {d.path} does not exist (from {Path.cwd()}); point data.path at a"
                " manifest.jsonl, an annotation.json or a folder holding one"
            ]
        )
    problems = cohort_problems(d.path, d.val_fraction, d.test_fraction, d.deal_sites)
    if problems:
        raise DataValidationError(problems)
