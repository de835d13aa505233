"""The ``stripemq`` data source's options, parsed and checked once on the driver.

Spark hands options as a case-insensitive map of strings (keys lowercased);
``SourceOptions.parse`` turns it into one picklable record the executors receive with every
partition. Names follow the Pulsar Spark connector where it has one (``topic``, ``topics``,
``topicsPattern``, ``failOnDataLoss``, ``startingOffsets``, ``maxEntriesPerTrigger``).
An option this source does not know is refused (a misspelt one would otherwise be ignored
silently), and so is a path: Spark passes ``load(path)`` as the option ``path`` (or
``paths``), which means nothing to this source.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from stripemq.errors import ConfigError
from stripemq.proto.topic_name import InvalidTopicNameError, TopicName

DEFAULT_MAX_ENTRIES_PER_PARTITION = 20_000
DEFAULT_MAX_BYTES_PER_PARTITION = 64 * 1024 * 1024
DEFAULT_MAX_RECORDS_PER_BATCH = 10_000
DEFAULT_PUBLISH_TIME_SKEW_MS = 60_000
_SCHEMES = ("zk://", "local://")
# The options this source knows, by the lowercase key Spark hands over, with the name they
# are documented (and reported) by.
OPTION_NAMES = {
    name.lower(): name
    for name in (
        "metadata",
        "topic",
        "topics",
        "topicsPattern",
        "failOnDataLoss",
        "maxEntriesPerPartition",
        "maxBytesPerPartition",
        "maxRecordsPerBatch",
        "publishTimeSkewMs",
        "startingOffsets",
        "maxEntriesPerTrigger",
        "stripemq.exportSplits",  # internal: the export's exact entry ranges (source.py)
    )
}


@dataclass(frozen=True)
class SourceOptions:
    """What to read and how to split it."""

    metadata: str  # zk://host:port/chroot or local:///standalone-data/metadata
    topics: tuple[str, ...] = ()  # full topic names (a partitioned topic means all partitions)
    topics_pattern: str | None = None  # a regex over full names within one namespace
    fail_on_data_loss: bool = True
    max_entries_per_partition: int = DEFAULT_MAX_ENTRIES_PER_PARTITION
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    max_records_per_batch: int = DEFAULT_MAX_RECORDS_PER_BATCH
    # Producers stamp publish times with their own clocks when they send, ledgers carry the
    # broker's times when they store: pruning by time keeps this much slack on both. A
    # message stored later than this after its publish time (a producer's clock far off,
    # or a send retried across a long outage) can be pruned by a publish-time filter:
    # raise it for such topics, or set it very large to prune nothing.
    publish_time_skew_ms: int = DEFAULT_PUBLISH_TIME_SKEW_MS
    starting_offsets: str = "earliest"  # streaming: earliest | latest
    max_entries_per_trigger: int | None = None  # streaming: cap on entries per micro-batch

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SourceOptions:
        """Check ``raw`` (Spark's options); ``ConfigError`` names the bad option as it is
        documented (``maxEntriesPerPartition``), refuses one it does not know (suggesting
        the closest known name) and a key given twice in different case."""
        opts: dict[str, str] = {}
        for key, value in raw.items():
            name = str(key).strip().lower()
            if name in opts:
                raise ConfigError(f'option "{OPTION_NAMES.get(name, key)}" is given twice')
            if name not in OPTION_NAMES:
                _refuse_unknown(str(key).strip())
            opts[name] = str(value)
        metadata = opts.get("metadata", "").strip()
        if not metadata:
            raise ConfigError('option "metadata" is required: zk://host:port/chroot or local://DIR')
        if not metadata.startswith(_SCHEMES):
            raise ConfigError(f'option "metadata" must be zk:// or local://, not {metadata!r}')
        given = [name for name in ("topic", "topics", "topicspattern") if opts.get(name)]
        if len(given) != 1:
            raise ConfigError('give exactly one of the options "topic", "topics", "topicsPattern"')
        topics: tuple[str, ...] = ()
        pattern: str | None = None
        if given[0] == "topicspattern":
            pattern = opts["topicspattern"]
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(f'option "topicsPattern" is not a regex: {exc}') from None
            _namespace_of_pattern(pattern)
        else:
            names = [t.strip() for t in opts[given[0]].split(",") if t.strip()]
            if not names:
                raise ConfigError(f'option "{given[0]}" names no topic')
            topics = tuple(dict.fromkeys(_full_name(name) for name in names))
        starting = opts.get("startingoffsets", "earliest").strip().lower()
        if starting not in ("earliest", "latest"):
            raise ConfigError(f'option "startingOffsets" is earliest or latest, not {starting!r}')
        per_trigger = opts.get("maxentriespertrigger")
        return cls(
            metadata=metadata,
            topics=topics,
            topics_pattern=pattern,
            fail_on_data_loss=_boolean(opts, "failondataloss", True),
            max_entries_per_partition=_positive(
                opts, "maxentriesperpartition", DEFAULT_MAX_ENTRIES_PER_PARTITION
            ),
            max_bytes_per_partition=_positive(
                opts, "maxbytesperpartition", DEFAULT_MAX_BYTES_PER_PARTITION
            ),
            max_records_per_batch=_positive(
                opts, "maxrecordsperbatch", DEFAULT_MAX_RECORDS_PER_BATCH
            ),
            publish_time_skew_ms=_positive(
                opts, "publishtimeskewms", DEFAULT_PUBLISH_TIME_SKEW_MS, zero=True
            ),
            starting_offsets=starting,
            max_entries_per_trigger=(
                _positive(opts, "maxentriespertrigger", 1) if per_trigger is not None else None
            ),
        )

    @property
    def pattern_namespace(self) -> str:
        """``tenant/namespace`` a ``topicsPattern`` searches (its literal prefix)."""
        assert self.topics_pattern is not None
        return _namespace_of_pattern(self.topics_pattern)


def _full_name(name: str) -> str:
    try:
        topic = TopicName.parse(name)
    except InvalidTopicNameError as exc:
        raise ConfigError(str(exc)) from None
    if not topic.persistent:
        raise ConfigError(f"{topic}: only persistent topics are stored in ledgers")
    return str(topic)


def _namespace_of_pattern(pattern: str) -> str:
    """Pulsar's rule: a pattern names its namespace literally (``persistent://t/ns/orders-.*``)."""
    match = re.match(r"^(?:persistent://)?([A-Za-z0-9_=:.-]+)/([A-Za-z0-9_=:.-]+)/", pattern)
    if match is None:
        raise ConfigError(
            f'option "topicsPattern" must start with persistent://<tenant>/<namespace>/, '
            f"not {pattern!r}"
        )
    return f"{match.group(1)}/{match.group(2)}"


def _boolean(opts: Mapping[str, str], name: str, default: bool) -> bool:
    value = opts.get(name)
    if value is None:
        return default
    if value.strip().lower() in ("true", "1", "yes"):
        return True
    if value.strip().lower() in ("false", "0", "no"):
        return False
    raise ConfigError(f'option "{OPTION_NAMES[name]}" must be true or false, not {value!r}')


def _positive(opts: Mapping[str, str], name: str, default: int, *, zero: bool = False) -> int:
    value = opts.get(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(
            f'option "{OPTION_NAMES[name]}" must be an integer, not {value!r}'
        ) from None
    if number < 0 or (number == 0 and not zero):
        raise ConfigError(f'option "{OPTION_NAMES[name]}" must be positive, not {number}')
    return number


def _refuse_unknown(key: str) -> None:
    """Raises: ConfigError: always, for ``key``, an option this source does not know."""
    if key.lower() in ("path", "paths"):
        raise ConfigError(
            "the stripemq source reads topics, not a path: give the option "
            '"topic", "topics" or "topicsPattern" and call load() without one'
        )
    close = difflib.get_close_matches(key.lower(), OPTION_NAMES, n=1)
    if close:
        hint = f'did you mean "{OPTION_NAMES[close[0]]}"?'
    else:
        hint = "known: " + ", ".join(
            name for name in OPTION_NAMES.values() if not name.startswith("stripemq.")
        )
    raise ConfigError(f'unknown option "{key}" ({hint})')
