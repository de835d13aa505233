"""Readiness and Prometheus metrics from ZooKeeper's four-letter words, without I/O.

``mntr`` answers one ``zk_<name>\\t<value>`` line per figure. ``/metrics`` shows them under
the names ZooKeeper's own ``PrometheusMetricsProvider`` gives them (it is not in Debian's
package, so the figures come from the default provider through ``mntr``):

- a plain figure ``zk_<name>`` is the gauge ``<name>`` (``znode_count``,
  ``num_alive_connections``, ``outstanding_requests``, ``avg_latency``, ...); ``mntr`` does
  not say which figures are counters, so all are written as gauges;
- a summary (the default provider writes ``zk_cnt_<name>``, ``zk_sum_<name>``,
  ``zk_avg_<name>``, ``zk_min_<name>``, ``zk_max_<name>`` and, for those with percentiles,
  ``zk_p50_<name>``...``zk_p999_<name>``) is the Prometheus summary ``<name>``:
  ``<name>_count``, ``<name>_sum`` and ``<name>{quantile="0.5"}``...; its avg, min and max
  have no Prometheus counterpart and are left out;
- text values (``zk_version``, ``zk_server_state``) are left out: numeric values only.

Every answer also carries stripemq's gauge ``zookeeper_up``: 1 when ``mntr`` answered, 0
(and nothing else) when it did not, so a scrape of a server that is down still succeeds.

``srvr`` answers ``Mode: leader|follower|standalone|observer`` once the server serves
clients; ``readiness`` turns the answers to ``ruok`` and ``srvr`` into a verdict.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

UP_METRIC = "zookeeper_up"
SERVING_MODES = ("leader", "follower", "standalone", "observer")
_PERCENTILES = {"p50": "0.5", "p95": "0.95", "p99": "0.99", "p999": "0.999"}
_SUMMARY_PARTS = ("cnt", "sum", "avg", "min", "max", *_PERCENTILES)
_INVALID = re.compile(r"[^a-zA-Z0-9_:]")


def parse_mntr(text: str) -> dict[str, str]:
    """``mntr``'s answer as ``{"zk_znode_count": "5", ...}`` (lines without a tab are
    skipped: a server that does not serve answers one sentence)."""
    figures = {}
    for line in text.splitlines():
        key, tab, value = line.partition("\t")
        if tab and key.strip():
            figures[key.strip()] = value.strip()
    return figures


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _name(raw: str) -> str:
    name = _INVALID.sub("_", raw)
    return f"_{name}" if name[:1].isdigit() else name


def _format(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


@dataclass
class _Summary:
    count: float | None = None
    total: float | None = None
    quantiles: dict[str, float] = field(default_factory=dict)


def prometheus_text(figures: dict[str, str] | None) -> str:
    """The ``/metrics`` body for ``parse_mntr``'s figures; ``None``: ``mntr`` failed."""
    if not figures:
        return f"# TYPE {UP_METRIC} gauge\n{UP_METRIC} 0\n"
    numeric = {}
    for key, text in figures.items():
        value = _number(text)
        if key.startswith("zk_") and len(key) > 3 and value is not None:
            numeric[key[3:]] = value
    summaries: dict[str, _Summary] = {}
    for name in numeric:
        part, _, base = name.partition("_")
        if part == "cnt" and base:
            summaries[base] = _Summary()
    gauges: dict[str, float] = {}
    for name, value in numeric.items():
        part, _, base = name.partition("_")
        summary = summaries.get(base) if part in _SUMMARY_PARTS else None
        if summary is None:
            gauges[_name(name)] = value
        elif part == "cnt":
            summary.count = value
        elif part == "sum":
            summary.total = value
        elif part in _PERCENTILES:
            summary.quantiles[_PERCENTILES[part]] = value
    lines = [f"# TYPE {UP_METRIC} gauge", f"{UP_METRIC} 1"]
    for name, value in sorted(gauges.items()):
        if name == UP_METRIC:
            continue
        lines += [f"# TYPE {name} gauge", f"{name} {_format(value)}"]
    for base, summary in sorted(summaries.items()):
        name = _name(base)
        lines.append(f"# TYPE {name} summary")
        for quantile, value in sorted(summary.quantiles.items(), key=lambda q: float(q[0])):
            lines.append(f'{name}{{quantile="{quantile}"}} {_format(value)}')
        lines.append(f"{name}_count {_format(summary.count or 0.0)}")
        lines.append(f"{name}_sum {_format(summary.total or 0.0)}")
    return "\n".join(lines) + "\n"


def server_mode(srvr: str) -> str | None:
    """The ``Mode:`` line of ``srvr``'s answer (``leader``, ``follower``, ...), or None."""
    for line in srvr.splitlines():
        key, colon, value = line.partition(":")
        if colon and key.strip() == "Mode":
            return value.strip()
    return None


@dataclass(frozen=True)
class Readiness:
    """Whether the server serves clients, and why not."""

    ready: bool
    reason: str


def readiness(ruok: str | None, srvr: str | None) -> Readiness:
    """The verdict from the answers to ``ruok`` and ``srvr`` (None: no answer)."""
    if ruok is None:
        return Readiness(False, "no answer to ruok on the client port")
    if ruok.strip() != "imok":
        return Readiness(False, f"ruok answered {ruok.strip()!r}, not 'imok'")
    if srvr is None:
        return Readiness(False, "no answer to srvr")
    mode = server_mode(srvr)
    if mode in SERVING_MODES:
        return Readiness(True, f"serving as {mode}")
    text = " ".join(srvr.split())[:200]
    return Readiness(False, f"not serving: {text or 'empty answer to srvr'}")
