"""The one configuration loader: dataclass defaults, then a TOML file, then ``key=value``.

Every process (bookie, broker, standalone) describes its settings as a dataclass whose field
names are the setting names. Values are converted to the field's declared type, and unknown
keys are refused, so a typo in a config file is an error and not a silently ignored line.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from stripemq.errors import ConfigError

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _convert(name: str, raw: Any, target: Any) -> Any:
    """Convert ``raw`` (from TOML or a command-line string) to the field type ``target``."""
    origin = typing.get_origin(target)
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        args = [a for a in typing.get_args(target) if a is not type(None)]
        if raw is None or (isinstance(raw, str) and raw.lower() in ("", "none", "null")):
            return None
        return _convert(name, raw, args[0])
    try:
        if target is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise ValueError(f"not a boolean: {raw!r}")
        if target is int:
            if isinstance(raw, bool):
                raise ValueError("a boolean is not an integer")
            return int(raw)
        if target is float:
            return float(raw)
        if target is str:
            return str(raw)
        if origin is list:
            (item_type,) = typing.get_args(target)
            items = raw if isinstance(raw, list) else [p for p in str(raw).split(",") if p]
            return [_convert(name, item, item_type) for item in items]
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"setting {name!r}: {exc}") from exc
    raise ConfigError(f"setting {name!r}: unsupported type {target!r}")


def parse_overrides(pairs: Iterable[str]) -> dict[str, str]:
    """Turn ``["a=1", "b=x"]`` (repeated ``-c`` options) into a mapping."""
    result: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"expected key=value, got {pair!r}")
        result[key.strip()] = value.strip()
    return result


def read_toml(path: str | Path) -> dict[str, Any]:
    """The settings in a TOML file; ``ConfigError`` if it cannot be read or parsed."""
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc


ENV_PREFIX = "STRIPEMQ_"


def env_settings(fields: Iterable[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Settings from ``STRIPEMQ_<NAME>`` environment variables, for the given field names."""
    environ = os.environ if environ is None else environ
    found = {}
    for name in fields:
        value = environ.get(ENV_PREFIX + name.upper())
        if value is not None:
            found[name] = value
    return found


def load_config(
    cls: type[T],
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> T:
    """Build a ``cls`` instance from its defaults, a TOML file, ``STRIPEMQ_*`` environment
    variables and overrides (in that order: later ones win)."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    sources: list[tuple[str, Mapping[str, Any]]] = []
    if path is not None:
        sources.append((str(path), read_toml(path)))
    from_env = env_settings(fields, environ)
    if from_env:
        sources.append(("the environment", from_env))
    if overrides:
        sources.append(("overrides", overrides))
    for origin, mapping in sources:
        for key, raw in mapping.items():
            if key not in fields:
                known = ", ".join(sorted(fields))
                raise ConfigError(f"unknown setting {key!r} in {origin}; known: {known}")
            values[key] = _convert(key, raw, hints[key])
    instance = cls(**values)
    validate = getattr(instance, "validate", None)
    if callable(validate):
        validate()
    return instance
