"""The one configuration loader: dataclass defaults, then a TOML file, then ``key=value``.

Every process (bookie, broker, standalone) describes its settings as a dataclass, named
``<Thing>Config`` in its package's ``config.py``, whose field names are the setting names.
Values are converted to the field's declared type, and unknown keys are refused, so a typo in
a config file is an error and not a silently ignored line.

Settings are documented once, next to their field: ``setting(default, doc, ...)`` puts the
help text (and the setting's name in Pulsar's conf files, and the command-line option that
also sets it) into the field's metadata. ``describe`` reads it back; ``render_settings`` (what
``stripemq <role> --print-config`` prints) and ``settings_table`` (the README's tables,
written by ``scripts/gen_settings_docs.py``) are built from it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import textwrap
import tomllib
import types
import typing
from collections.abc import Collection, Iterable, Mapping
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
# Every role's metadata_service_uri, which tools (stripemq wait, shell) default to as well.
METADATA_ENV = f"{ENV_PREFIX}METADATA_SERVICE_URI"


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


def setting(
    default: Any,
    doc: str,
    *,
    pulsar_name: str | None = None,
    option: str | None = None,
) -> Any:
    """A documented settings field: ``bookie_port: int = setting(3181, "gRPC port.")``.

    ``doc`` is the setting's help (``--print-config``, the README's tables). ``pulsar_name``
    is its name in Pulsar's conf files (``broker.conf``, or ``bookkeeper.conf`` for bookie
    and auto-recovery settings) when it mirrors one; ``option`` a command-line option of the
    role's command that sets it too (``stripemq.cli`` adds the option from it).

    ``default`` is an immutable value; a field with a mutable default is declared with
    ``dataclasses.field(default_factory=..., metadata={"doc": ...})`` instead.
    """
    doc = " ".join(doc.split())
    if not doc:
        raise ValueError("a setting needs a doc")
    metadata = {"doc": doc}
    if pulsar_name is not None:
        metadata["pulsar_name"] = pulsar_name
    if option is not None:
        metadata["option"] = option
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class SettingDoc:
    """One field of a settings dataclass, as its documentation shows it."""

    name: str
    type: str  # as written in Python: "int", "str | None", "list[str]"
    default: Any  # dataclasses.MISSING for a required field
    doc: str  # "" for a field not declared with ``setting``
    pulsar_name: str | None = None
    option: str | None = None


def describe(cls: type) -> list[SettingDoc]:
    """The fields of the settings dataclass ``cls`` with their docs, in declaration order."""
    hints = typing.get_type_hints(cls)
    result = []
    for f in dataclasses.fields(cls):
        default: Any = f.default
        factory = f.default_factory
        if default is dataclasses.MISSING and callable(factory):
            default = factory()
        result.append(
            SettingDoc(
                name=f.name,
                type=type_name(hints[f.name]),
                default=default,
                doc=f.metadata.get("doc", ""),
                pulsar_name=f.metadata.get("pulsar_name"),
                option=f.metadata.get("option"),
            )
        )
    return result


def type_name(hint: Any) -> str:
    """A field type as Python spells it: ``int``, ``str | None``, ``list[str]``."""
    if hint is type(None):
        return "None"
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(type_name(arg) for arg in typing.get_args(hint))
    if origin is not None:
        args = ", ".join(type_name(arg) for arg in typing.get_args(hint))
        return f"{origin.__name__}[{args}]"
    return getattr(hint, "__name__", str(hint))


def toml_value(value: Any) -> str:
    """``value`` as a TOML literal (``true``, ``6650``, ``"memory://"``); ``TypeError`` for
    what a settings file cannot say (``None``, bytes, a nested config)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's string escapes are all TOML escapes too
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    raise TypeError(f"no TOML literal for {value!r}")


def format_value(value: Any) -> str:
    """A setting's value as documentation shows it: its TOML literal, or ``unset``."""
    if value is None:
        return "unset"
    if value is dataclasses.MISSING:
        return "required"
    try:
        return toml_value(value)
    except TypeError:
        return repr(value)


def render_settings(
    config: Any,
    *,
    skip: Collection[str] = (),
    commented: bool = False,
    comment_out: Collection[str] = (),
    width: int = 96,
) -> str:
    """``config``'s settings as a commented TOML file (``stripemq <role> --print-config``).

    Above each setting's current value, comments give its help, then its type, default,
    Pulsar name and command-line option. An unset (``None``) setting is commented out, so the
    text stays a valid settings file for ``--conf``; ``commented`` comments out every value
    (for options that are not settings-file keys), ``comment_out`` the values of the settings
    it names (values a role derives from its options, which a file must not pin). Settings
    named in ``skip`` are left out.
    """
    lines: list[str] = []
    for item in describe(type(config)):
        if item.name in skip:
            continue
        if item.doc:
            lines += textwrap.wrap(
                item.doc,
                width,
                initial_indent="# ",
                subsequent_indent="# ",
                break_long_words=False,
                break_on_hyphens=False,
            )
        facts = [item.type, f"default {format_value(item.default)}"]
        if item.pulsar_name:
            facts.append(f"Pulsar name {item.pulsar_name}")
        if item.option:
            facts.append(f"option {item.option}")
        lines.append(f"# ({'; '.join(facts)})")
        value = getattr(config, item.name)
        try:
            line = f"{item.name} = {toml_value(value)}"
        except TypeError:
            line = f"# {item.name} = {format_value(value)}"
        hidden = commented or item.name in comment_out
        lines.append(f"# {line}" if hidden and not line.startswith("#") else line)
        lines.append("")
    return "\n".join(lines)


def settings_table(cls: type) -> str:
    """The settings of the dataclass ``cls`` as a Markdown table, one row per field in
    declaration order (the README's settings tables; ``scripts/gen_settings_docs.py``)."""
    rows = ["| setting | type | default | Pulsar name | meaning |", "|---|---|---|---|---|"]
    for item in describe(cls):
        name = f"`{item.name}`" + (f" (`{item.option}`)" if item.option else "")
        default = "—" if item.default is None else f"`{format_value(item.default)}`"
        pulsar = f"`{item.pulsar_name}`" if item.pulsar_name else ""
        cells = (name, f"`{item.type}`", default, pulsar, item.doc)
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows) + "\n"
