from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rip5.config import CommonConfig, ConfigError, convert, options_of, resolve


@dataclass(frozen=True)
class Sample:
    listen: str = field(default="127.0.0.1:1000", metadata={"kind": "address"})
    peers: str = field(default="", metadata={"kind": "addresses"})
    count: int = field(default=3, metadata={"min": 1, "max": 9})
    ratio: float = 0.5
    mode: str = field(default="a", metadata={"choices": ["a", "b"]})
    enabled: bool = False
    where: Path = Path("x")


def test_defaults_apply_when_nothing_is_given() -> None:
    assert resolve(Sample, "s") == Sample()


def test_flags_beat_env_beat_file_beat_defaults() -> None:
    file_values = {"count": 4, "mode": "b", "ratio": 0.25}
    env = {"RIP5_S_COUNT": "5", "RIP5_S_MODE": "a"}
    flags = {"count": "6", "mode": None}
    config = resolve(Sample, "s", file_values=file_values, env=env, flags=flags)
    assert config.count == 6  # flag
    assert config.mode == "a"  # env (flag not given)
    assert config.ratio == 0.25  # file
    assert config.listen == "127.0.0.1:1000"  # default


def test_env_of_other_sections_is_ignored() -> None:
    assert resolve(Sample, "s", env={"RIP5_OTHER_COUNT": "oops", "HOME": "/"}) == Sample()


@pytest.mark.parametrize(
    ("source", "expected_source"),
    [
        ({"flags": {"count": "12"}}, "flag --count"),
        ({"env": {"RIP5_S_COUNT": "12"}}, "environment RIP5_S_COUNT"),
        ({"file_values": {"count": 12}, "file_name": "c.toml"}, "c.toml [s] count"),
    ],
)
def test_a_bad_value_names_option_value_source_and_allowed(
    source: dict[str, object], expected_source: str
) -> None:
    with pytest.raises(ConfigError) as info:
        resolve(Sample, "s", **source)  # type: ignore[arg-type]
    message = str(info.value)
    assert "'count'" in message
    assert "12" in message
    assert expected_source in message
    assert "an integer from 1 to 9" in message


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("listen", "no-port"),
        ("listen", "host:0"),
        ("listen", "host:65536"),
        ("listen", ":80"),
        ("peers", "a:1,b"),
        ("mode", "c"),
        ("enabled", "maybe"),
        ("enabled", 1),
        ("count", "3.5"),
        ("count", 2.5),
        ("count", True),
        ("ratio", "fast"),
        ("where", "  "),
        ("mode", 7),
    ],
)
def test_invalid_values_are_rejected(name: str, raw: object) -> None:
    spec = {s.name: s for s in options_of(Sample)}[name]
    with pytest.raises(ConfigError, match=f"'{name}'"):
        convert(spec, raw, "test")


@pytest.mark.parametrize(
    ("name", "raw", "value"),
    [
        ("enabled", "yes", True),
        ("enabled", "OFF", False),
        ("enabled", True, True),
        ("peers", "a:1, b:2", "a:1,b:2"),
        ("peers", "", ""),
        ("count", " 7 ", 7),
        ("ratio", 1, 1.0),
        ("where", "~/d", Path("~/d").expanduser()),
    ],
)
def test_valid_values_are_converted(name: str, raw: object, value: object) -> None:
    spec = {s.name: s for s in options_of(Sample)}[name]
    assert convert(spec, raw, "test") == value


def test_unknown_file_key_and_env_var_are_rejected() -> None:
    with pytest.raises(ConfigError, match="a known option: count"):
        resolve(Sample, "s", file_values={"cuont": 1})
    with pytest.raises(ConfigError, match="RIP5_S_COUNT"):
        resolve(Sample, "s", env={"RIP5_S_CUONT": "1"})


def test_ignored_names_belong_to_another_config() -> None:
    config = resolve(
        Sample,
        "s",
        file_values={"log_level": "debug"},
        env={"RIP5_S_DATA_DIR": "/d"},
        ignore={"log_level", "data_dir"},
    )
    assert config == Sample()


def test_common_config_defaults_are_valid() -> None:
    common = resolve(CommonConfig, "broker")
    assert common.log_level == "info"
    assert common.shutdown_timeout_ms == 10_000
    assert all(spec.help for spec in options_of(CommonConfig))


def test_describe_never_shows_a_secret_option() -> None:
    from broker.config import BrokerConfig
    from rip5.config import describe

    shown = dict(describe(BrokerConfig(secret="s3cr3t-value")))
    assert shown["secret"] == "<set>"
    assert "s3cr3t-value" not in repr(describe(BrokerConfig(secret="s3cr3t-value")))
    assert dict(describe(BrokerConfig()))["secret"] == "<unset>"
    assert shown["listen"] == "127.0.0.1:8081"
