"""What the console says when a sweep (or any command but `run`) is stopped by Ctrl-C or SIGTERM.
It used to print `run`'s advice, "`secure-fed run --resume DIR` continues from the last
checkpoint", which is untrue for a sweep: there is no run folder to resume, and the way back is the
same sweep command (finished cells are skipped; the cell that was running is set aside and run
again). Under a second."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

import secure_fed.cli as cli
import secure_fed.cli.common as cli_common
import secure_fed.lab.cli as lab_cli


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_an_interrupted_sweep_says_how_to_resume_it(tmp_path: Path, monkeypatch, stop: str) -> None:
    def stopped(*args: object, **kwargs: object) -> None:
        if stop == "SIGTERM":
            signal.raise_signal(signal.SIGTERM)  # as a service manager stops it
        raise KeyboardInterrupt

    monkeypatch.setattr("secure_fed.lab.sweep.sweep", stopped)
    out = tmp_path / "sweep"
    result = CliRunner().invoke(lab_cli.app, ["sweep", "--methods", "base", "--seeds", "0", "-o", str(out)])
    words = " ".join(result.output.split())
    assert result.exit_code == 128 + getattr(signal, stop), result.output
    assert "run --resume" not in words
    assert ("terminated" if stop == "SIGTERM" else "interrupted") in words
    assert "finished cells" in words and str(out) in words
    assert signal.getsignal(signal.SIGTERM) is not cli_common.raise_terminated  # put back


def test_another_command_stopped_by_ctrl_c_gives_no_run_advice(monkeypatch, capsys) -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "app", interrupted)
    with pytest.raises(SystemExit) as stop:
        cli.main()
    assert stop.value.code == 130
    said = capsys.readouterr()
    assert "interrupted" in said.out + said.err and "--resume" not in said.out + said.err
