"""The compliance report of real runs (the in-process engine, tiny preset) at 3 sites and at 20:
verdict first, one table row per site, no per-site sentence repeated, and a 20-site summary no
longer in prose than a 3-site one's plus its rows. (tests/verifier/test_report_scale.py holds the
same properties on written logs with exceptions in them; these are the logs a run writes.)"""

from __future__ import annotations

import re

import pytest

from secure_fed.audits.keys import load_public_keys
from secure_fed.crypto.keys import init_keys
from secure_fed.launch.runner import run_inprocess
from secure_fed.verifier.report import write_report
from tests.verifier.test_report_scale import SITE_NAME, _prose, _sentences, _text
from tests.verifier.test_report_truth import site_table


@pytest.fixture(scope="module")
def pages(cache_dir, tmp_path_factory, one_torch_thread) -> dict[int, str]:  # noqa: ANN001
    from tests.conftest import small_config

    out: dict[int, str] = {}
    for sites in (3, 20):
        root = tmp_path_factory.mktemp(f"run{sites}")
        keys = root / "keys"
        init_keys(keys, ["server", *(f"site{i}" for i in range(sites))])
        cfg = small_config(
            cache_dir,
            root / "run",
            data__synth__sites=sites,
            data__synth__patients=12,
            fed__rounds=1,
            fed__method="fedavg",
            dp__enabled=True,
            dp__target_epsilon=8.0,
            dp__sample_rate=0.5,
            secagg__enabled=True,
            audit__keys_dir=str(keys),
            train__local_epochs=1,
        )
        run_inprocess(cfg, cfg.out)
        logs = sorted((cfg.out / "audit").glob("*.jsonl"))
        page, _, _ = write_report(logs, cfg.out / "report.html", load_public_keys(keys))
        out[sites] = page.read_text(encoding="utf-8")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("sites", [3, 20])
def test_a_real_runs_report_leads_with_its_verdict_and_has_a_row_per_site(pages: dict, sites: int) -> None:
    page = pages[sites]
    body = page[page.index("<body>") :]
    first = next(line for line in (_text(p) for p in re.split(r"</(?:h1|p)>", body)) if line)
    assert first.startswith("VERIFIED — every site within budget: max ε "), first
    assert [row["site"] for row in site_table(page)] == [f"site{i}" for i in range(sites)]
    shapes = [SITE_NAME.sub("SITE", s) for s in _sentences(_prose(page))]
    assert len(shapes) == len(set(shapes)), [s for s in shapes if shapes.count(s) > 1]


@pytest.mark.slow
def test_a_twenty_site_runs_summary_reads_as_long_as_a_three_site_ones(pages: dict) -> None:
    three, twenty = _prose(pages[3]), _prose(pages[20])
    assert len(twenty) <= 1.2 * len(three), (len(three), len(twenty))
