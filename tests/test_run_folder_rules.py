"""The run folder's rules live with the runner (the CLI only prints their one line): a new run
never lands in or inside another run's folder, `--resume` only continues an unfinished run, and a
flag beside `--resume` that would not apply is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from secure_fed.config import RunConfig
from secure_fed.launch.runner.folder import (
    RunFolderRefused,
    check_new_folder,
    check_resumable,
    enclosing_run,
    resumed_config,
    run_in_folder,
)


def _started_run(folder: Path) -> Path:
    (folder / "audit").mkdir(parents=True)
    (folder / "config.json").write_text(RunConfig().model_dump_json())
    (folder / "run_id").write_text("abc\n")
    return folder


def test_a_new_run_refuses_a_folder_that_holds_or_encloses_a_run(tmp_path: Path) -> None:
    check_new_folder(tmp_path / "fresh")  # nothing there: accepted
    run = _started_run(tmp_path / "run")
    assert run_in_folder(run) == "run_id, config.json, audit/"
    with pytest.raises(RunFolderRefused, match=r"holds a run already .*--resume"):
        check_new_folder(run)
    assert enclosing_run(run / "audit" / "new") == run.resolve()
    with pytest.raises(RunFolderRefused, match="lies inside the run folder"):
        check_new_folder(run / "audit" / "new")
    (run / "metrics.json").write_text("{}")
    with pytest.raises(RunFolderRefused, match="that run finished"):
        check_new_folder(run)


def test_resume_continues_only_an_unfinished_run_as_it_started(tmp_path: Path) -> None:
    with pytest.raises(RunFolderRefused, match="no run to continue there"):
        check_resumable(tmp_path)
    run = _started_run(tmp_path / "run")
    check_resumable(run)
    assert resumed_config(run, {"--rounds": None}) == RunConfig()
    with pytest.raises(RunFolderRefused, match=r"--rounds would not apply"):
        resumed_config(run, {"--rounds": 3})
    (run / "config.json").write_text("{not json")
    with pytest.raises(RunFolderRefused, match="not a run configuration"):
        resumed_config(run, {})
    (run / "metrics.json").write_text("{}")
    with pytest.raises(RunFolderRefused, match="that run finished"):
        check_resumable(run)
