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
    except ConfigError as exc:
        # the message names the offending field (or one it conflicts with)
        assert any(name in str(exc) for name in FIELDS + ["bogus"]), str(exc)


valid_configs = st.fixed_dictionaries({
    "base_batch": st.integers(1, 512), "interval_steps": st.integers(1, 200), "deadband": st.floats(0, 0.99),
    "controller": st.sampled_from(["static", "proportional", "goodput", "random", "ppo"]),
    "lr_rule": st.sampled_from(["none", "linear", "sqrt", "adascale"]), "accumulation": st.integers(1, 8),
    "max_rank_change": st.floats(0.01, 100), "max_global_change": st.floats(0.01, 100),
    "max_batch_growth": st.one_of(st.none(), st.floats(1, 1000)), "gns": st.booleans()})


@settings(max_examples=200, deadline=None)
@given(valid_configs)
def test_valid_configs_load_and_keep_their_values(kwargs):
    cfg = DynamixConfig.load(env={}, max_batch=1024, **kwargs)
    for k, v in kwargs.items():
        assert getattr(cfg, k) == v


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from([f"DYNAMIX_{f.upper()}" for f in FIELDS]), st.text(max_size=16), max_size=4))
def test_config_env_only_config_error(env):
    try:
        DynamixConfig.load(env=env)
    except ConfigError as exc:
        # names the environment variable or the field it sets
        assert "DYNAMIX_" in str(exc) or any(name in str(exc) for name in FIELDS), str(exc)


def _env_text(v) -> str:
    return str(v).lower() if isinstance(v, bool) else repr(v) if isinstance(v, float) else str(v)


def _toml_text(v) -> str:
    return str(v).lower() if isinstance(v, bool) else f'"{v}"' if isinstance(v, str) else repr(v)


@settings(max_examples=200, deadline=None)
@given(valid_configs)
def test_valid_env_overrides_load_and_keep_their_values(kwargs):
    """Positive case of the environment fuzz: every valid setting given as DYNAMIX_<FIELD> arrives."""
    env = {f"DYNAMIX_{k.upper()}": ("none" if v is None else _env_text(v)) for k, v in kwargs.items()}
    cfg = DynamixConfig.load(env=dict(env, DYNAMIX_MAX_BATCH="1024"))
    for k, v in kwargs.items():
        assert getattr(cfg, k) == v, (k, env[f"DYNAMIX_{k.upper()}"])


@settings(max_examples=200, deadline=None)
@given(valid_configs)
def test_valid_toml_files_load_and_keep_their_values(tmp_path_factory, kwargs):
    """Positive case of the TOML fuzz: a valid file (top level or under [dynamix]) keeps its values."""
    path = tmp_path_factory.mktemp("cfg") / "c.toml"
    body = "".join(f"{k} = {_toml_text(v)}\n" for k, v in kwargs.items() if v is not None) + "max_batch = 1024\n"
    for text in (body, "[dynamix]\n" + body):
        path.write_text(text)
        cfg = DynamixConfig.load(path, env={})
        for k, v in kwargs.items():
            assert getattr(cfg, k) == v, (k, text)


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


@st.composite
def valid_scenario_texts(draw):
    n = draw(st.integers(1, 6))
    base = draw(st.integers(1, 64))
    lines = ['name = "fuzz"', 'workload = "mnist1d_cnn"', f"target_accuracy = {draw(st.floats(0.1, 0.99)):.3f}",
             f"max_time_s = {draw(st.integers(1, 600))}", f"base_batch = {base}", f"seed = {draw(st.integers(0, 99))}"]
    for _ in range(n):
        lines += ["[[workers]]", f"fixed_ms = {draw(st.floats(0.1, 50)):.3f}",
                  f"per_sample_ms = {draw(st.floats(0.01, 20)):.3f}", f"max_batch = {draw(st.integers(base, 1024))}"]
    for _ in range(draw(st.integers(0, 2))):
        lines += ["[[events]]", f"at_s = {draw(st.floats(0, 100)):.2f}", f"rank = {draw(st.integers(0, n - 1))}",
                  f"per_sample_ms = {draw(st.floats(0.01, 20)):.3f}"]
    return n, "\n".join(lines) + "\n"


@settings(max_examples=150, deadline=None)
@given(valid_scenario_texts())
def test_valid_scenarios_parse(case):
    from dynamix_hvd.emulate.scenario import parse_scenario

    n, text = case
    sc = parse_scenario(text)
    assert sc.world_size == n and sc.name == "fuzz"
