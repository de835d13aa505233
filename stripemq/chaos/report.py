"""The human-readable page of a chaos run: ``DIR/report.html``.

One self-contained HTML file (inline CSS, the timeline figure embedded as a base64 PNG, no
script and no external resource), so it can be attached to an issue or opened from a CI
artifact as is. It shows the verdict and its checks, the fault counts, the run's other scalar
figures, a timeline and the list of faults.

The timeline's zero is ``summary["started_ms"]`` (when the workload started); its x axis is
seconds since then. Per-second figures come from ``timeline_buckets``, a pure function of the
history, so they are tested without matplotlib. Every string from the summary or the history
is HTML-escaped: fault details and check details may hold any text.

matplotlib (the ``[chaos]`` extra) is imported only when the figure is drawn, through the Agg
canvas and without pyplot's global state. ``write_report`` blocks (drawing, writing): call it
off the event loop.
"""

from __future__ import annotations

import base64
import html
import io
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stripemq.chaos.history import FaultEvent, History, Outcome

log = logging.getLogger(__name__)

MATPLOTLIB_MISSING = "the chaos report needs matplotlib: pip install 'stripemq[chaos]'"

# Summary keys the page shows elsewhere than in the figures table.
_SHOWN_ELSEWHERE = frozenset({"verdict", "seed", "checks", "faults"})


@dataclass(slots=True)
class Bucket:
    """What happened during one second of the run, ``[second, second + 1)`` on the timeline.

    Percentiles are in milliseconds, None when the second holds no sample."""

    second: int  # seconds since started_ms (negative for anything stamped before it)
    published: int = 0  # acked sends, by done_ms
    not_acked: int = 0  # failed or unknown sends, by done_ms (sent_ms when never done)
    consumed: int = 0  # first deliveries, by received_ms
    redelivered: int = 0  # deliveries with redelivery_count > 0, by received_ms
    publish_p50_ms: float | None = None  # done_ms - sent_ms of the acked sends
    publish_p99_ms: float | None = None
    e2e_p50_ms: float | None = None  # received_ms - sent_ms of every delivery
    e2e_p99_ms: float | None = None


def percentile(values: Sequence[float], pct: float) -> float | None:
    """The nearest-rank percentile (an actual sample, never interpolated); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def timeline_buckets(history: History, started_ms: int) -> list[Bucket]:
    """One bucket per second, contiguous over the events and second 0 (the workload's start).

    Fault starts and ends count as events (so the timeline spans the faults too, with empty
    seconds where nothing was sent or received). An empty history gives no bucket."""
    by_second: dict[int, Bucket] = {}
    publish: dict[int, list[int]] = {}  # second -> publish latencies (ms)
    e2e: dict[int, list[int]] = {}  # second -> end-to-end latencies (ms)

    def bucket(ms: int) -> Bucket:
        second = (ms - started_ms) // 1000
        found = by_second.get(second)
        if found is None:
            found = by_second[second] = Bucket(second)
        return found

    for send in history.sends:
        b = bucket(send.done_ms if send.done_ms is not None else send.sent_ms)
        if send.outcome is not Outcome.ACKED:
            b.not_acked += 1
            continue
        b.published += 1
        if send.done_ms is not None:
            publish.setdefault(b.second, []).append(send.done_ms - send.sent_ms)
    for delivery in history.deliveries:
        b = bucket(delivery.received_ms)
        if delivery.redelivery_count > 0:
            b.redelivered += 1
        else:
            b.consumed += 1
        e2e.setdefault(b.second, []).append(delivery.received_ms - delivery.sent_ms)
    for fault in history.faults:
        bucket(fault.start_ms)
        if fault.end_ms is not None:
            bucket(fault.end_ms)

    if not by_second:
        return []
    first, last = min(0, min(by_second)), max(0, max(by_second))
    buckets = [by_second.get(s) or Bucket(s) for s in range(first, last + 1)]
    for b in buckets:
        b.publish_p50_ms = percentile(publish.get(b.second, []), 50)
        b.publish_p99_ms = percentile(publish.get(b.second, []), 99)
        b.e2e_p50_ms = percentile(e2e.get(b.second, []), 50)
        b.e2e_p99_ms = percentile(e2e.get(b.second, []), 99)
    return buckets


def write_report(out_dir: Path, summary: dict[str, Any], history: History) -> Path:
    """Write out_dir/report.html (one self-contained page, PNG embedded as base64) and return
    its path.

    Raises:
        RuntimeError: matplotlib is not installed.
    """
    started_ms = _started_ms(summary, history)
    png = render_timeline_png(history, started_ms)
    page = render_html(summary, history, started_ms, png)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "report.html"
    path.write_text(page, encoding="utf-8")
    log.info("[chaos] report written to %s (%d bytes)", path, len(page))
    return path


def _started_ms(summary: dict[str, Any], history: History) -> int:
    """The timeline's zero: the summary's, else the first thing the history stamped."""
    started = summary.get("started_ms")
    if isinstance(started, int) and not isinstance(started, bool):
        return started
    stamps = [s.sent_ms for s in history.sends]
    stamps += [d.received_ms for d in history.deliveries]
    stamps += [f.start_ms for f in history.faults]
    return min(stamps, default=0)


# --------------------------------------------------------------------------- figure


def _seconds(ms: int, started_ms: int) -> float:
    return (ms - started_ms) / 1000.0


def _plot_end_s(buckets: Sequence[Bucket], faults: Iterable[FaultEvent], started_ms: int) -> float:
    """Where the x axis stops: past the last bucket and every fault, at least one second."""
    end = float(buckets[-1].second + 1) if buckets else 1.0
    for fault in faults:
        end = max(end, _seconds(fault.start_ms, started_ms))
        if fault.end_ms is not None:
            end = max(end, _seconds(fault.end_ms, started_ms))
    return end


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


# A fault over within this long (a bit flip, a truncation) is drawn as a point in time.
INSTANT_MS = 300


def _lasting(fault: FaultEvent) -> bool:
    """Whether a fault lasted long enough to be drawn as an interval."""
    return fault.end_ms is not None and fault.end_ms - fault.start_ms >= INSTANT_MS


def render_timeline_png(history: History, started_ms: int) -> bytes:
    """The three-panel timeline (rates, latencies, faults) as PNG bytes.

    Raises:
        RuntimeError: matplotlib is not installed.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
    except ImportError as exc:
        raise RuntimeError(MATPLOTLIB_MISSING) from exc

    buckets = timeline_buckets(history, started_ms)
    faults = sorted(history.faults, key=lambda f: (f.start_ms, f.target, f.kind))
    start_s = float(buckets[0].second) if buckets else 0.0
    end_s = _plot_end_s(buckets, faults, started_ms)
    kinds = sorted({f.kind for f in faults})
    palette = [f"C{i % 10}" for i in range(len(kinds))]
    color = dict(zip(kinds, palette, strict=True))

    fig = Figure(figsize=(12, 9), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    rates, latency, bars = fig.subplots(3, 1, sharex=True, height_ratios=[2.0, 2.0, 1.5])

    # Buckets are plotted at their middle, so a second's figure sits over that second.
    xs = [b.second + 0.5 for b in buckets]
    rates.plot(xs, [b.published for b in buckets], label="published (acked) /s", color="C0")
    rates.plot(xs, [b.consumed for b in buckets], label="consumed /s", color="C2")
    if any(b.redelivered for b in buckets):
        rates.plot(xs, [b.redelivered for b in buckets], label="redelivered /s", color="C1")
    if any(b.not_acked for b in buckets):
        rates.plot(xs, [b.not_acked for b in buckets], label="failed or unknown /s", color="C3")
    rates.set_ylabel("messages / s")
    rates.set_title("rates")

    series = [
        ("publish p50", [_nan(b.publish_p50_ms) for b in buckets], "C0", "-"),
        ("publish p99", [_nan(b.publish_p99_ms) for b in buckets], "C0", "--"),
        ("end-to-end p50", [_nan(b.e2e_p50_ms) for b in buckets], "C2", "-"),
        ("end-to-end p99", [_nan(b.e2e_p99_ms) for b in buckets], "C2", "--"),
    ]
    for label, ys, line_color, style in series:
        latency.plot(xs, ys, label=label, color=line_color, linestyle=style)
    if any(y > 0 for _, ys, _, _ in series for y in ys if not math.isnan(y)):
        latency.set_yscale("log", nonpositive="mask")
    latency.set_ylabel("latency (ms)")
    latency.set_title("latency per second")

    for ax in (rates, latency):
        for fault in faults:
            at = _seconds(fault.start_ms, started_ms)
            if _lasting(fault):
                assert fault.end_ms is not None
                ax.axvspan(
                    at,
                    _seconds(fault.end_ms, started_ms),
                    color=color[fault.kind],
                    alpha=0.08,
                    linewidth=0,
                )
            else:
                ax.axvline(at, color=color[fault.kind], alpha=0.5, linewidth=0.8)
        if buckets:
            ax.legend(loc="upper right", fontsize="small")
        else:
            ax.text(
                0.5,
                0.5,
                "no messages recorded",
                ha="center",
                va="center",
                transform=ax.transAxes,
                color="grey",
            )
        ax.grid(True, alpha=0.3)

    targets = sorted({f.target for f in faults})
    row = {target: i for i, target in enumerate(targets)}
    for fault in faults:
        y = row[fault.target]
        at = _seconds(fault.start_ms, started_ms)
        if fault.end_ms is None:
            # Nothing heals it (or it was still active): a fainter bar to the end of the plot.
            bars.broken_barh(
                [(at, max(end_s - at, 0.0))],
                (y - 0.3, 0.6),
                facecolors=color[fault.kind],
                alpha=0.35,
            )
            bars.plot([at], [y], marker="|", markersize=14, color=color[fault.kind])
        elif _lasting(fault):
            bars.broken_barh(
                [(at, _seconds(fault.end_ms, started_ms) - at)],
                (y - 0.3, 0.6),
                facecolors=color[fault.kind],
            )
        else:
            bars.plot([at], [y], marker="D", markersize=6, color=color[fault.kind])
    bars.set_yticks(range(len(targets)), labels=targets, fontsize="small")
    bars.set_ylim(max(len(targets), 1) - 0.3, -0.7)  # inverted: the first target on top
    bars.set_title("faults")
    bars.set_xlabel("seconds since the workload started")
    if kinds:
        handles: list[Patch | Line2D] = [Patch(color=color[k], label=k) for k in kinds]
        bars.legend(
            handles=handles,
            loc="upper left",
            bbox_to_anchor=(1.0, 1.0),
            fontsize="small",
            title="kind",
        )
    else:
        bars.text(
            0.5,
            0.5,
            "no faults injected",
            ha="center",
            va="center",
            transform=bars.transAxes,
            color="grey",
        )
    bars.grid(True, axis="x", alpha=0.3)
    bars.set_xlim(start_s, end_s)

    out = io.BytesIO()
    fig.savefig(out, format="png", metadata={"Software": None})
    return out.getvalue()


# --------------------------------------------------------------------------- page

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1250px; color: #222; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
.verdict { font-size: 2.4em; font-weight: bold; margin: 0.3em 0; }
.pass { color: #17803d; }
.fail { color: #b91c1c; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.detail { white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: 0.9em; }
.muted { color: #777; }
img { max-width: 100%; }
"""


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _scalar(value: object) -> str:
    """A summary figure as text: floats to three decimals, None as a dash."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _is_scalar(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _table(head: Sequence[str], rows: Iterable[str], empty: str) -> str:
    """A table from already-escaped ``<tr>`` rows, or a muted line when there are none."""
    body = list(rows)
    if not body:
        return f'<p class="muted">{_esc(empty)}</p>'
    header = "".join(f"<th>{_esc(h)}</th>" for h in head)
    return f"<table>\n<tr>{header}</tr>\n" + "\n".join(body) + "\n</table>"


def _pass_fail(passed: bool) -> str:
    return '<td class="pass">pass</td>' if passed else '<td class="fail">FAIL</td>'


def render_html(
    summary: dict[str, Any], history: History, started_ms: int, png: bytes | None
) -> str:
    """The page itself; ``png`` is the timeline figure (None: no figure)."""
    verdict = str(summary.get("verdict", "unknown"))
    verdict_class = {"pass": "pass", "fail": "fail"}.get(verdict.lower(), "")
    seed = summary.get("seed", "?")
    started = datetime.fromtimestamp(started_ms / 1000.0, tz=UTC).isoformat(timespec="seconds")

    checks = summary.get("checks")
    check_rows = []
    for check in checks if isinstance(checks, list) else []:
        if not isinstance(check, dict):
            continue
        check_rows.append(
            f"<tr><td>{_esc(check.get('name', ''))}</td>{_pass_fail(bool(check.get('passed')))}"
            f'<td class="detail">{_esc(check.get("detail", ""))}</td></tr>'
        )

    counts = summary.get("faults")
    count_rows = [
        f'<tr><td>{_esc(kind)}</td><td class="num">{_esc(_scalar(n))}</td></tr>'
        for kind, n in (counts.items() if isinstance(counts, dict) else [])
    ]

    figure_rows = [
        f'<tr><td>{_esc(key)}</td><td class="num">{_esc(_scalar(value))}</td></tr>'
        for key, value in summary.items()
        if key not in _SHOWN_ELSEWHERE and _is_scalar(value)
    ]

    fault_rows = []
    for fault in sorted(history.faults, key=lambda f: (f.start_ms, f.target, f.kind)):
        end = "—" if fault.end_ms is None else f"{_seconds(fault.end_ms, started_ms):.3f}"
        fault_rows.append(
            f'<tr><td class="num">{_seconds(fault.start_ms, started_ms):.3f}</td>'
            f'<td class="num">{_esc(end)}</td><td>{_esc(fault.kind)}</td>'
            f'<td>{_esc(fault.target)}</td><td class="detail">{_esc(fault.detail)}</td></tr>'
        )

    if png is None:
        figure = '<p class="muted">no figure</p>'
    else:
        data = base64.b64encode(png).decode("ascii")
        figure = f'<img alt="timeline of the run" src="data:image/png;base64,{data}">'

    title = f"stripemq chaos run — seed {seed}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_esc(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head><body>",
        f"<h1>{_esc(title)}</h1>",
        f'<p class="muted">workload started {_esc(started)} (the timeline\'s zero)</p>',
        f'<div class="verdict {verdict_class}">{_esc(verdict.upper())}</div>',
        "<h2>Verdict</h2>",
        _table(["check", "result", "detail"], check_rows, "no checks recorded"),
        "<h2>Faults by kind</h2>",
        _table(["kind", "count"], count_rows, "no faults injected"),
        "<h2>Figures</h2>",
        _table(["figure", "value"], figure_rows, "no figures recorded"),
        "<h2>Timeline</h2>",
        figure,
        "<h2>Faults</h2>",
        _table(
            ["start (s)", "end (s)", "kind", "target", "detail"], fault_rows, "no faults injected"
        ),
        "</body></html>",
        "",
    ]
    return "\n".join(parts)
