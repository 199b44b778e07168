"""Fuzz: configuration and scenario parsing raise no exception type but the documented one."""
from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from dynamix_hvd.config import ConfigError, DynamixConfig

FIELDS = [f.name for f in dataclasses.fields(DynamixConfig)]
values = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                   st.text(max_size=12), st.lists(st.integers(-5, 5000), max_size=5).map(tuple),
                   st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(FIELDS + ["bogus"]), values, max_size=5))
def test_config_kwargs_only_config_error(kwargs):
    try:
        DynamixConfig.load(env={}, **kwargs)
    except ConfigError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from([f"DYNAMIX_{f.upper()}" for f in FIELDS]), st.text(max_size=16), max_size=4))
def test_config_env_only_config_error(env):
    try:
        DynamixConfig.load(env=env)
    except ConfigError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_config_toml_only_config_error(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("cfg") / "c.toml"
    path.write_text(text)
    try:
        DynamixConfig.load(path, env={})
    except ConfigError:
        pass


toml_scalars = st.one_of(st.integers(-100, 10**5), st.floats(-1e3, 1e6, allow_nan=False), st.booleans(),
                         st.text(alphabet="abc_", max_size=5).map(lambda s: f'"{s}"'))
WORKER_KEYS = ["fixed_ms", "per_sample_ms", "max_batch", "bandwidth_mbit", "latency_ms", "bogus"]
TOP_KEYS = ["name", "workload", "target_accuracy", "max_time_s", "base_batch", "seed", "extra"]


@st.composite
def scenario_texts(draw):
    lines = []
    for k in draw(st.lists(st.sampled_from(TOP_KEYS), max_size=7, unique=True)):
        lines.append(f"{k} = {draw(toml_scalars)}")
    for _ in range(draw(st.integers(0, 3))):
        lines.append("[[workers]]")
        for k in draw(st.lists(st.sampled_from(WORKER_KEYS), max_size=6, unique=True)):
            lines.append(f"{k} = {draw(toml_scalars)}")
    for _ in range(draw(st.integers(0, 2))):
        lines.append("[[events]]")
        for k in draw(st.lists(st.sampled_from(["at_s", "rank", "fixed_ms", "bandwidth_mbit", "nope"]),
                               max_size=4, unique=True)):
            lines.append(f"{k} = {draw(toml_scalars)}")
    return "\n".join(lines) + "\n"


@settings(max_examples=300, deadline=None)
@given(st.one_of(scenario_texts(), st.text(max_size=120)))
def test_scenario_parsing_only_scenario_error(text):
    from dynamix_hvd.emulate.scenario import ScenarioError, parse_scenario

    try:
        parse_scenario(text)
    except ScenarioError:
        pass
