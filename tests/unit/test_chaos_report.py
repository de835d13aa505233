"""The chaos run's page (``stripemq.chaos.report``): per-second timeline arithmetic on a
hand-made history, and the HTML page (verdict, checks, escaping, embedded PNG, faults)."""

from __future__ import annotations

import base64
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from stripemq.chaos.history import Delivery, FaultEvent, History, Outcome, SendRecord
from stripemq.chaos.report import Bucket, percentile, timeline_buckets, write_report

T0 = 1_700_000_000_000  # started_ms: the timeline's zero
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def send(sent: int, done: int | None, outcome: Outcome = Outcome.ACKED, seq: int = 0) -> SendRecord:
    return SendRecord(
        topic="t",
        producer="p0",
        key="k",
        seq=seq,
        dedup=True,
        sent_ms=T0 + sent,
        outcome=outcome,
        done_ms=None if done is None else T0 + done,
    )


def delivery(sent: int, received: int, redelivery_count: int = 0) -> Delivery:
    return Delivery(
        topic="t",
        subscription="shared",
        consumer="c0",
        producer="p0",
        key="k",
        seq=0,
        sent_ms=T0 + sent,
        received_ms=T0 + received,
        redelivery_count=redelivery_count,
    )


def sample_history() -> History:
    history = History()
    # Second 0: three acked sends with latencies 10, 20, 30 ms; one failed, one unknown.
    history.sends += [send(0, 10), send(100, 120), send(200, 230)]
    history.sends += [send(300, 400, Outcome.FAILED), send(500, None, Outcome.UNKNOWN)]
    # Second 3: one acked send; seconds 1 and 2 stay empty.
    history.sends.append(send(3_000, 3_005))
    # Deliveries: second 0 one first delivery (50 ms); second 3 one first and one redelivery.
    history.deliveries += [delivery(0, 50), delivery(3_000, 3_100), delivery(0, 3_900, 1)]
    history.faults += [
        FaultEvent("sigkill", "bookie-1", T0 + 1_500, T0 + 2_500, "pid 1234"),
        FaultEvent("bit_flip", "bookie-2", T0 + 2_000, None, "<script>alert(1)</script>"),
        FaultEvent("zk_expire", "broker-0", T0 + 4_200, T0 + 4_200, "session 0x1 & more"),
    ]
    return history


def sample_summary() -> dict[str, Any]:
    return {
        "verdict": "fail",
        "seed": 4242,
        "duration_s": 3.5,
        "started_ms": T0,
        "acked": 4,
        "failed": 1,
        "unknown": 1,
        "lost": 1,
        "duplicated": 0,
        "reordered": 0,
        "faults": {"sigkill": 1, "bit_flip": 1, "zk_expire": 1},
        "recovery_s": None,
        "checks": [
            {"name": "no_lost_messages", "passed": False, "detail": "lost <script>x</script>"},
            {"name": "no_duplicates_with_dedup", "passed": True, "detail": "0 duplicated"},
        ],
        "cluster_layout": "4 bookies E3/Qw2/Qa2",
        "nested_unknown": {"a": 1},
    }


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([7], 99) == 7.0
    assert percentile(list(range(1, 101)), 50) == 50.0
    assert percentile(list(range(1, 101)), 99) == 99.0
    assert percentile([30, 10, 20], 50) == 20.0
    assert percentile([30, 10, 20], 99) == 30.0


def test_buckets_count_rates_and_latencies_per_second() -> None:
    buckets = timeline_buckets(sample_history(), T0)

    # Contiguous from 0 to the last event (the zk_expire fault at 4.2 s).
    assert [b.second for b in buckets] == [0, 1, 2, 3, 4]
    first, one, two, three, four = buckets
    assert first == Bucket(
        second=0,
        published=3,
        not_acked=2,
        consumed=1,
        redelivered=0,
        publish_p50_ms=20.0,
        publish_p99_ms=30.0,
        e2e_p50_ms=50.0,
        e2e_p99_ms=50.0,
    )
    # Seconds with only faults, or nothing at all, are empty buckets.
    assert one == Bucket(1) and two == Bucket(2) and four == Bucket(4)
    assert (three.published, three.consumed, three.redelivered) == (1, 1, 1)
    assert (three.publish_p50_ms, three.publish_p99_ms) == (5.0, 5.0)
    # End-to-end latency covers redeliveries too: 100 ms and 3900 ms.
    assert (three.e2e_p50_ms, three.e2e_p99_ms) == (100.0, 3900.0)


def test_buckets_of_an_empty_history_and_of_events_before_the_start() -> None:
    assert timeline_buckets(History(), T0) == []
    early = History(sends=[send(-1_500, -1_400)])
    assert [b.second for b in timeline_buckets(early, T0)] == [-2, -1, 0]
    assert timeline_buckets(early, T0)[0].published == 1


def test_the_page_shows_the_verdict_checks_figures_and_faults(tmp_path: Path) -> None:
    path = write_report(tmp_path / "run", sample_summary(), sample_history())

    assert path == tmp_path / "run" / "report.html"
    page = path.read_text(encoding="utf-8")
    assert "stripemq chaos run — seed 4242" in page
    assert re.search(r'class="verdict fail">FAIL<', page)
    for name in ("no_lost_messages", "no_duplicates_with_dedup"):
        assert name in page
    # Details are escaped wherever they come from: checks and faults.
    assert "<script>" not in page
    assert "lost &lt;script&gt;x&lt;/script&gt;" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "session 0x1 &amp; more" in page
    # Fault counts, the scalar figures (not the nested one), and one row per fault.
    assert "<td>bit_flip</td>" in page
    assert "cluster_layout" in page and "4 bookies E3/Qw2/Qa2" in page
    assert "nested_unknown" not in page
    assert '<td class="num">1.500</td><td class="num">2.500</td><td>sigkill</td>' in page
    assert '<td class="num">2.000</td><td class="num">—</td><td>bit_flip</td>' in page
    assert "<td>broker-0</td>" in page
    # No external resource.
    assert "http://" not in page and "https://" not in page and "<script" not in page

    match = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert match is not None
    assert base64.b64decode(match.group(1)).startswith(PNG_MAGIC)


def test_an_empty_history_still_renders(tmp_path: Path) -> None:
    summary = {"verdict": "pass", "seed": 1, "started_ms": T0, "faults": {}, "checks": []}
    page = write_report(tmp_path, summary, History()).read_text(encoding="utf-8")

    assert re.search(r'class="verdict pass">PASS<', page)
    assert "no faults injected" in page
    match = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert match is not None
    assert base64.b64decode(match.group(1)).startswith(PNG_MAGIC)


def test_a_missing_matplotlib_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(RuntimeError, match=r"pip install 'stripemq\[chaos\]'"):
        write_report(tmp_path, {"verdict": "pass", "seed": 1}, History())
    assert not (tmp_path / "report.html").exists()
