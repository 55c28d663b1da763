"""Configuration: defaults < TOML file < environment (RIP5_...) < flags.

A role's options are a frozen dataclass whose fields carry declarative
metadata (``help``; for validation ``kind`` = "address" | "addresses" | "peers",
``min``/``max``, ``choices``). This module turns the raw values of each source
into one validated instance, and reports the first bad value as a
:class:`ConfigError` that names the option, the value, where it came from and
what is allowed.

PURE: the caller reads the file and the environment and passes them in.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

ENV_PREFIX = "RIP5_"
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")


@dataclass(frozen=True)
class CommonConfig:
    """Options every role process has."""

    data_dir: Path = field(
        default=Path("data"),
        metadata={"help": "folder for this process's durable state (created if missing)"},
    )
    log_level: str = field(
        default="info", metadata={"help": "least severe level logged", "choices": LOG_LEVELS}
    )
    log_format: str = field(
        default="text",
        metadata={
            "help": "text = key=value per line; json = one object per line",
            "choices": LOG_FORMATS,
        },
    )
    shutdown_timeout_ms: int = field(
        default=10_000,
        metadata={
            "help": "how long a graceful stop may take before work is cancelled",
            "min": 0,
            "max": 600_000,
        },
    )


class ConfigError(Exception):
    """A configuration value was rejected; the message says which, why, and from where."""

    code = "CONFIG_INVALID"
    retriable = False

    def __init__(self, option: str, value: object, source: str, allowed: str) -> None:
        self.option = option
        self.value = value
        self.source = source
        self.allowed = allowed
        super().__init__(
            f"invalid value for option '{option}' ({source}): {value!r}; expected {allowed}"
        )


@dataclass(frozen=True)
class OptionSpec:
    """One option of a role, derived from a dataclass field."""

    name: str
    type: type
    default: Any
    help: str
    kind: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None

    @property
    def flag(self) -> str:
        """The command-line flag, e.g. ``--data-dir``."""
        return "--" + self.name.replace("_", "-")

    def env_var(self, section: str) -> str:
        """The environment variable, e.g. ``RIP5_BROKER_DATA_DIR``."""
        return f"{ENV_PREFIX}{section.upper()}_{self.name.upper()}"

    def allowed(self) -> str:
        """Human description of the values this option accepts."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind == "address":
            return "host:port with a port from 1 to 65535"
        if self.kind == "addresses":
            return "comma-separated host:port, each port from 1 to 65535"
        if self.kind == "peers":
            return "comma-separated ID=host:port, distinct ids from 1 to 65535"
        if self.type is bool:
            return "true or false"
        if self.type in (int, float):
            low = "-inf" if self.minimum is None else f"{self.minimum:g}"
            high = "inf" if self.maximum is None else f"{self.maximum:g}"
            noun = "an integer" if self.type is int else "a number"
            return f"{noun} from {low} to {high}"
        return "a string" if self.type is str else "a path"


def options_of(config_type: type) -> list[OptionSpec]:
    """The options declared by a config dataclass, in field order."""
    hints = typing.get_type_hints(config_type)
    specs = []
    for f in dataclasses.fields(config_type):
        meta = f.metadata
        choices = meta.get("choices")
        specs.append(
            OptionSpec(
                name=f.name,
                type=hints[f.name],
                default=f.default,
                help=str(meta.get("help", "")),
                kind=meta.get("kind"),
                minimum=meta.get("min"),
                maximum=meta.get("max"),
                choices=tuple(choices) if choices else None,
            )
        )
    return specs


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _check_address(text: str) -> bool:
    host, sep, port = text.strip().rpartition(":")
    return bool(sep and host and port.isdigit() and 1 <= int(port) <= 65535)


def _check_peers(text: str) -> bool:
    ids = []
    for part in text.split(","):
        node, sep, address = part.strip().partition("=")
        if not sep or not node.isdigit() or not 1 <= int(node) <= 65535:
            return False
        if not _check_address(address):
            return False
        ids.append(int(node))
    return len(set(ids)) == len(ids)


def convert(spec: OptionSpec, raw: object, source: str) -> Any:
    """Turn one raw value (a string from env/flags, or a TOML value) into the option's type."""

    def reject() -> ConfigError:
        return ConfigError(spec.name, raw, source, spec.allowed())

    value: Any
    if spec.type is bool:
        if isinstance(raw, bool):
            value = raw
        elif isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
            value = raw.strip().lower() in _TRUE
        else:
            raise reject()
    elif spec.type in (int, float):
        if isinstance(raw, bool):
            raise reject()
        if not isinstance(raw, str | int | float):
            raise reject()
        try:
            value = spec.type(raw.strip() if isinstance(raw, str) else raw)
        except (TypeError, ValueError):
            raise reject() from None
        if isinstance(raw, float) and spec.type is int and raw != value:
            raise reject()
        if (spec.minimum is not None and value < spec.minimum) or (
            spec.maximum is not None and value > spec.maximum
        ):
            raise reject()
    elif spec.type is Path:
        if not isinstance(raw, str | Path) or not str(raw).strip():
            raise reject()
        value = Path(str(raw).strip()).expanduser()
    else:
        if not isinstance(raw, str):
            raise reject()
        value = raw.strip()
    if spec.choices and value not in spec.choices:
        raise reject()
    if spec.kind == "address" and not _check_address(value):
        raise reject()
    if spec.kind == "addresses" and value:
        if not all(_check_address(part) for part in value.split(",")):
            raise reject()
        value = ",".join(part.strip() for part in value.split(","))
    if spec.kind == "peers" and value:
        if not _check_peers(value):
            raise reject()
        value = ",".join(part.strip() for part in value.split(","))
    return value


def resolve(
    config_type: type[T],
    section: str,
    *,
    file_values: Mapping[str, object] | None = None,
    file_name: str = "config file",
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, object] | None = None,
    ignore: Collection[str] = (),
) -> T:
    """Build ``config_type`` from defaults, then the file's ``[section]``, env, flags.

    ``flags`` holds only the options given on the command line (absent or None
    means not given). Keys in ``ignore`` belong to another config read from
    the same section and are skipped. Raises :class:`ConfigError` for an unknown key in the
    file or in the role's environment namespace, and for any bad value.
    """
    specs = {spec.name: spec for spec in options_of(config_type)}
    values: dict[str, Any] = {}
    for key, raw in (file_values or {}).items():
        if key in ignore:
            continue
        spec = specs.get(key)
        if spec is None:
            raise ConfigError(
                f"{section}.{key}",
                raw,
                f"{file_name} [{section}]",
                "a known option: " + ", ".join(sorted(specs)),
            )
        values[key] = convert(spec, raw, f"{file_name} [{section}] {key}")
    prefix = f"{ENV_PREFIX}{section.upper()}_"
    for var, raw in (env or {}).items():
        if not var.startswith(prefix):
            continue
        name = var[len(prefix) :].lower()
        if name in ignore:
            continue
        spec = specs.get(name)
        if spec is None:
            raise ConfigError(
                var,
                raw,
                "environment",
                "a known variable: " + ", ".join(s.env_var(section) for s in specs.values()),
            )
        values[name] = convert(spec, raw, f"environment {var}")
    for name, raw in (flags or {}).items():
        if raw is None:
            continue
        spec = specs[name]
        values[name] = convert(spec, raw, f"flag {spec.flag}")
    return config_type(**values)


def describe(instance: object) -> Sequence[tuple[str, object]]:
    """(option, value) pairs of a resolved config, for the start-up log line.

    Options whose metadata has ``secret`` show only whether they are set.
    """
    return [
        (f.name, _shown(f, getattr(instance, f.name)))
        for f in dataclasses.fields(instance)  # type: ignore[arg-type]
    ]


def _shown(option: dataclasses.Field[Any], value: object) -> object:
    if option.metadata.get("secret"):
        return "<set>" if value else "<unset>"
    return value
