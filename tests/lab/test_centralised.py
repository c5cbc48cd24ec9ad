"""Issue 2's learning check: a centrally trained tiny model beats an untrained one on every metric."""

from __future__ import annotations

import math

import pytest

from secure_fed.lab.centralised import train_centralised
from secure_fed.site.evaluation import METRIC_NAMES


@pytest.mark.slow
def test_centrally_trained_beats_untrained_on_every_metric(make_config):
    # Untrained: no pretraining of the base, no adapter training (random initialisation).
    # A cohort big enough that every finding occurs among the test patients.
    data = {
        "data__synth__patients": 40,
        "data__synth__visits": 5,
        "data__max_visits": 5,
        "data__val_fraction": 0.2,
        "data__test_fraction": 0.2,
    }
    untrained_cfg = make_config(model__pretrain_steps=0, **data)
    _, untrained = train_centralised(untrained_cfg, epochs=0)
    # Trained: the tiny preset's base pretrained on the public cohort, adapters trained centrally on
    # the pooled training patients of every site, through the sites' own local-training function.
    # A 500-step base, not the preset's 2000: 2000 steps were most of this test's 220 s (500 take
    # ~50 s CPU), and 500 keep every metric above the untrained model's: CE-F1 0.23 / 0.25,
    # temporal consistency 0.41 / 0.31, CIDEr 3.4 / 3.5 at seeds 0 / 1 (seed 0 the same on 1 and
    # 2 threads; 2026-12-02).
    trained_cfg = make_config(model__pretrain_steps=500, **data)
    # 10 epochs (~90 steps), not 3: after 27 steps the model still wrote no finding on one machine
    # (CE-F1 0.0, as the untrained model), on another it did; at 10 it does, on both, in ~10 s,
    # far from that edge: CE-F1 0.76 / 0.73 and temporal consistency 0.48 / 0.50 at seeds 0 / 1,
    # the same on 1 and 2 threads (2026-12-02, on the 2000-step base)
    _, trained = train_centralised(trained_cfg, epochs=10)
    for name in METRIC_NAMES:
        before = 0.0 if math.isnan(untrained[name]) else untrained[name]
        assert not math.isnan(trained[name]), name
        assert trained[name] > before, (name, trained[name], before)
