"""tools/plot_sweeps.py: one plot over several sweeps' cells, its numbers the sweeps' own, and the
committed plots redrawn from the kept records they name (a stale PNG fails here)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
plot_sweeps = load_script("tools/plot_sweeps.py")

PNG = b"\x89PNG\r\n\x1a\n"


def _cells(method: str, epsilon: float | None, cider: list[float]) -> list[dict]:
    return [
        {"method": method, "epsilon": epsilon, "seed": s, "test": {"CIDEr": c, "CE-F1": c / 10}}
        for s, c in enumerate(cider)
    ]


def _folder(out: Path, cells: list[dict]) -> Path:
    for c in cells:
        eps = "inf" if c["epsilon"] is None else c["epsilon"]
        d = out / f"{c['method']}-eps{eps}-seed{c['seed']}"
        d.mkdir(parents=True)
        (d / "cell.json").write_text(json.dumps(c))
    return out


def test_points_are_each_sweeps_means_and_t_intervals(tmp_path: Path) -> None:
    central = _folder(
        tmp_path / "central",
        _cells("base", None, [1.0, 1.2, 1.1]) + _cells("central", 8.0, [4.0, 4.2, 4.4]),
    )
    record = tmp_path / "distributed.json"
    record.write_text(
        json.dumps({"config": {}, "base_model": "x", "runs": _cells("fedavg", 8.0, [3.0, 3.0, 3.6])})
    )

    data = plot_sweeps.points([f"{central}:central=pooled", f"{record}:fedavg=distributed"])

    pooled, dist = data["series"]
    assert pooled["label"] == "pooled" and dist["label"] == "distributed"
    (cell,) = pooled["cells"]
    assert cell["epsilon"] == 8.0 and cell["n"] == 3
    assert cell["CIDEr"]["mean"] == pytest.approx(4.2)
    # t(2) = 4.303, sample std 0.2, n = 3
    half = 4.303 * 0.2 / 3**0.5
    assert cell["CIDEr"]["ci"] == pytest.approx([4.2 - half, 4.2 + half], abs=1e-5)
    assert dist["cells"][0]["CE-F1"]["mean"] == pytest.approx(0.32)
    # base comes from the first sweep that has it, drawn as a line
    assert data["base"]["CIDEr"]["mean"] == pytest.approx(1.1)

    png = tmp_path / "plot.png"
    plot_sweeps.draw(data, png)
    assert png.read_bytes()[:8] == PNG


BAD_SERIES = [
    ("no-colon", "write it as PATH:METHOD=LABEL"),
    ("{dir}:central", "write it as PATH:METHOD=LABEL"),
    ("{dir}/missing:central=x", "no such sweep folder or kept record"),
    ("{dir}:fedtar=x", "has no fedtar cell"),
]


@pytest.mark.parametrize(("spec", "says"), BAD_SERIES)
def test_a_bad_series_is_one_line_naming_it(
    tmp_path: Path, spec: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _folder(tmp_path / "s", _cells("central", 8.0, [4.0, 4.1]))
    code = plot_sweeps.main(["-o", str(tmp_path / "p.png"), spec.format(dir=tmp_path / "s")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and says in err and "Traceback" not in err
    assert not (tmp_path / "p.png").exists()


@pytest.mark.slow
def test_the_script_itself_exits_2_with_the_one_line(tmp_path: Path) -> None:
    """The same refusal through the script as a user runs it (the cases above call its main)."""
    spec, says = BAD_SERIES[3]
    _folder(tmp_path / "s", _cells("central", 8.0, [4.0, 4.1]))
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "plot_sweeps.py"),
            "-o",
            str(tmp_path / "p.png"),
            spec.format(dir=tmp_path / "s"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and says in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "p.png").exists()


# the plots tools/plot_sweeps.py draws (paper-drift-plot.json is tools/plot_paper_drift.py's: below)
COMMITTED = sorted(
    p for p in (ROOT / "docs" / "results").glob("*-plot.json") if "series" in json.loads(p.read_text())
)


def test_the_paper_drift_plot_is_redrawn_from_its_kept_records() -> None:
    saved = json.loads((ROOT / "docs" / "results" / "paper-drift-plot.json").read_text())
    plot = load_script("tools/plot_paper_drift.py")
    fresh = plot.drift_points(
        [ROOT / p for p in saved["sweeps"]], saved["method"], saved["against"], saved["metric"]
    )
    assert fresh == saved["points"] and {p["drift"] for p in fresh} == {0.0, 0.5}


def test_there_is_a_committed_plot() -> None:
    assert COMMITTED, "docs/results/*-plot.json: the hospital-scale plot's numbers are committed"


@pytest.mark.parametrize("sidecar", COMMITTED, ids=lambda p: p.name)
def test_committed_plot_is_redrawn_from_its_kept_records(
    sidecar: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    saved = json.loads(sidecar.read_text())
    monkeypatch.chdir(ROOT)  # the specs name repository paths
    fresh = plot_sweeps.points([s["spec"] for s in saved["series"]], saved["metrics"])
    assert fresh["series"] == saved["series"] and fresh["base"] == saved["base"], (
        f"{sidecar.name} is stale: rerun the command in its docstring (tools/plot_sweeps.py)"
    )
    # the source's command is the one that drew it: the same series, PNG and points file
    argv = shlex.split(saved["source"]["command"])
    assert argv[:2] == ["python", "tools/plot_sweeps.py"]
    assert [a for a in argv if ":" in a and "=" in a] == [s["spec"] for s in saved["series"]]
    assert saved["png"] in argv and str(sidecar.relative_to(ROOT)) in argv
    png = ROOT / saved["png"]
    assert png.read_bytes()[:8] == PNG
    assert f"]({png.relative_to(ROOT / 'docs')})" in (ROOT / "docs" / "RESULTS.md").read_text()
