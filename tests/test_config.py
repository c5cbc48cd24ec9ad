"""One pydantic tree: unknown keys and out-of-range values are rejected with the key named."""

from __future__ import annotations

import pytest

from secure_fed.config import ConfigError, build_config, load_config


def test_defaults_are_the_embedded_demo():
    cfg = build_config({})
    assert cfg.fed.method == "fedtar" and cfg.model.preset == "tiny" and cfg.data.synth.sites == 3
    assert cfg.model.lora_rank == 4 and cfg.model.lora_alpha == 128 and cfg.model.gmm_components == 16
    assert not cfg.secagg_on  # secure aggregation follows DP unless set


def test_unknown_key_is_named(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[fed]\nrouns = 3\n")
    with pytest.raises(ConfigError, match=r"fed\.rouns: unknown key"):
        load_config(path)


@pytest.mark.parametrize(
    ("section", "key", "suggestion"),
    [
        ("fed", "rouns", " (did you mean fed.rounds?)"),  # a typo
        ("dp", "target_epsilo", " (did you mean dp.target_epsilon?)"),
        ("fed", "target_epsilon", " (did you mean dp.target_epsilon?)"),  # the right key, wrong section
        ("data.synth", "patiens", " (did you mean data.synth.patients?)"),  # a nested section
        ("fed", "colour", ""),  # nothing close: no guess
    ],
)
def test_an_unknown_key_comes_with_the_nearest_known_one(section, key, suggestion):
    with pytest.raises(ConfigError) as err:
        build_config(_nested(section, key))
    assert str(err.value) == f"{section}.{key}: unknown key{suggestion}"


def _nested(section: str, key: str) -> dict:
    tree: dict = {key: 1}
    for part in reversed(section.split(".")):
        tree = {part: tree}
    return tree


def test_out_of_range_value_is_named():
    with pytest.raises(ConfigError, match=r"dp\.sample_rate"):
        build_config({"dp": {"sample_rate": 1.5}})
    with pytest.raises(ConfigError, match=r"model\.gmm_reg_covar"):
        build_config({"model": {"gmm_reg_covar": 1e-9}})


@pytest.mark.parametrize("key", ["target_epsilon", "budget_epsilon", "noise_multiplier", "delta"])
def test_an_infinite_or_nan_privacy_setting_is_refused(tmp_path, key):
    """TOML spells inf and nan: `budget_epsilon = inf` would pass gt=0 and turn the guard off."""
    for value in ("inf", "nan"):
        path = tmp_path / "c.toml"
        settings = {"target_epsilon": "4.0", key: value}
        path.write_text("[dp]\nenabled = true\n" + "".join(f"{k} = {v}\n" for k, v in settings.items()))
        with pytest.raises(ConfigError, match=rf"dp\.{key}: {value} is not a finite number; set a number"):
            load_config(path)


def test_dp_needs_a_target_and_secagg_follows_dp():
    with pytest.raises(ConfigError, match="target_epsilon"):
        build_config({"dp": {"enabled": True}})
    cfg = build_config({"dp": {"enabled": True, "target_epsilon": 4.0}})
    assert cfg.secagg_on
    assert not build_config(
        {"dp": {"enabled": True, "target_epsilon": 4.0}, "secagg": {"enabled": False}}
    ).secagg_on


def test_overrides_and_missing_file(tmp_path):
    cfg = load_config(None, {"fed.rounds": 7, "fed.method": None})
    assert cfg.fed.rounds == 7 and cfg.fed.method == "fedtar"
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "absent.toml")


def test_no_gmm_ablation_drops_the_hyper_lora(make_config):
    from secure_fed.model.setup import build_report_model

    full = build_report_model(make_config(model__pretrain_steps=0))
    ablated = build_report_model(make_config(model__pretrain_steps=0, fed__method="fedtar-no-gmm"))
    assert any(".hyper." in n for n in full.trainable_state())
    assert not any(".hyper." in n or n.startswith("proj.") for n in ablated.trainable_state())
    assert ablated.proj is None


_DISTRIBUTED = {
    "dp": {"enabled": True, "target_epsilon": 4.0, "noise": "distributed"},
    "fed": {"method": "fedavg"},
    "train": {"local_epochs": 1},
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"dp": {"enabled": False, "noise": "distributed"}}, "needs dp.enabled"),
        ({"secagg": {"enabled": False}}, "needs SecAgg\\+"),
        ({"train": {"local_epochs": 2}}, "local multi-step training on partially noised gradients is not DP"),
        ({"dp": {"honest_min": 2, "colluders": 2}}, "dp.honest_min = 2 must exceed dp.colluders = 2"),
        ({"dp": {"honest_min": 4}}, "dp.honest_min = 4 exceeds the 3 sites"),
        ({"fed": {"method": "fedprox"}}, "'fedprox' with dp.noise = 'distributed' is not yet supported"),
        ({"fed": {"participation": 0.5}}, "fed.participation = 0.5 with dp.noise = 'distributed'"),
        # a budget too: without one the fixed σ is refused first, for leaving the site unbounded
        (
            {"dp": {"target_epsilon": None, "noise_multiplier": 1.0, "budget_epsilon": 4.0}},
            "needs dp.target_epsilon",
        ),
        ({"dp": {"accountant": "prv"}}, "dp.accountant = 'prv' with dp.noise = 'distributed'.*'rdp'"),
    ],
)
def test_distributed_noise_is_refused_where_it_would_not_be_dp(change, message):
    data = {key: {**_DISTRIBUTED.get(key, {}), **value} for key, value in change.items()}
    with pytest.raises(ConfigError, match=message) as err:
        build_config({**_DISTRIBUTED, **data})
    assert "\n" not in str(err.value)  # one line, naming the keys
    cfg = build_config(_DISTRIBUTED)
    assert cfg.dp.noise == "distributed" and cfg.dp.colluders == 1 and cfg.dp.honest_min is None


@pytest.mark.parametrize(("sites", "neighbours", "fits"), [(5, None, True), (10, None, False), (10, 9, True)])
def test_h_must_fit_a_sites_secagg_neighbourhood(sites, neighbours, fits):
    """A site unmasks only with h survivors in its own SecAgg+ view: at 10 sites the default sparse
    graph shows each site 8 of them, so the default h = 9 would abort every round at setup."""
    from secure_fed.crypto.secagg_protocol import SecAggSettings, neighbourhood_size
    from secure_fed.dp.distributed.run import check_honest_min, honest_min

    cfg = build_config({**_DISTRIBUTED, "secagg": {"neighbours": neighbours}})
    assert honest_min(cfg, sites) == sites - 1
    seen = neighbourhood_size(sites, SecAggSettings.from_config(cfg.secagg))
    if fits:
        check_honest_min(cfg, sites, seen)
        assert seen >= sites - 1
    else:
        with pytest.raises(
            ValueError, match=r"secagg.neighbours gives \d+ of 10: set secagg.neighbours to 8"
        ):
            check_honest_min(cfg, sites, seen)


@pytest.mark.parametrize(
    ("dp", "named"),
    [
        # calibrated to spend 8 with a budget of 4: a site would decline a round partway through the run
        (
            {"target_epsilon": 8.0, "budget_epsilon": 4.0},
            ["dp.budget_epsilon = 4", "dp.target_epsilon = 8", "raise dp.budget_epsilon to 8 or more"],
        ),
        # a fixed σ with no target and no budget: the site would have no ε to hold the run to
        ({"noise_multiplier": 1.0}, ["dp.noise_multiplier = 1", "set dp.budget_epsilon"]),
    ],
)
def test_a_privacy_budget_the_run_cannot_keep_is_refused_at_load(dp, named):
    with pytest.raises(ConfigError) as err:
        build_config({"dp": {"enabled": True, **dp}})
    message = str(err.value)
    assert "\n" not in message and all(part in message for part in named), message
    assert not message.startswith("dp: ")  # the message names its keys itself


def test_a_budget_at_or_above_the_target_and_a_fixed_noise_with_a_budget_load():
    assert build_config({"dp": {"enabled": True, "target_epsilon": 8.0, "budget_epsilon": 8.0}}).dp.enabled
    # a fixed σ charges what it charges: a budget below the target is the guard's to enforce per round
    fixed = {"enabled": True, "noise_multiplier": 2.0, "target_epsilon": 3.0, "budget_epsilon": 0.5}
    assert build_config({"dp": fixed}).dp.budget_epsilon == 0.5
    assert build_config({"dp": {"enabled": True, "noise_multiplier": 2.0, "budget_epsilon": 4.0}}).dp.enabled


@pytest.mark.parametrize(
    ("data", "line"),
    [
        ({"dp": {"sample_rate": 2}}, "dp.sample_rate: 2 is too large; set it to at most 1"),
        ({"fed": {"rounds": 0}}, "fed.rounds: 0 is too small; set it to at least 1"),
        ({"dp": {"target_epsilon": 0}}, "dp.target_epsilon: 0 is too small; set it above 0"),
        ({"dp": {"noise": "sitee"}}, "dp.noise: 'sitee' is not allowed; set one of 'site', 'distributed'"),
        ({"fed": {"rounds": "three"}}, "fed.rounds: 'three' is not a whole number; set a whole number"),
        ({"fed": {"rounds": 2.5}}, "fed.rounds: 2.5 is not a whole number; set a whole number"),
        ({"dp": {"enabled": "maybe"}}, "dp.enabled: 'maybe' is not true or false; set true or false"),
        ({"dp": 3}, "dp: 3 is not a table; write it as a [dp] table"),
    ],
)
def test_value_errors_are_in_our_words_with_the_key_and_the_fix(data, line):
    """Never the validation library's ("Input should be …", "Value error, …"): the key, the value
    given and what to set instead, on one line."""
    with pytest.raises(ConfigError) as err:
        build_config(data)
    assert str(err.value) == line
