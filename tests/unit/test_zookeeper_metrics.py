"""ZooKeeper's four-letter answers turned into Prometheus text and a readiness verdict."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from stripemq.zookeeper.metrics import (
    UP_METRIC,
    parse_mntr,
    prometheus_text,
    readiness,
    server_mode,
)

# Trimmed from a real 3.8 answer (standalone, after one write and one read).
MNTR = "\n".join(
    [
        "zk_version\t3.8.0-${mvngit.commit.id}, built on 2024-12-29 17:54 UTC",
        "zk_server_state\tstandalone",
        "zk_znode_count\t6",
        "zk_ephemerals_count\t0",
        "zk_num_alive_connections\t1",
        "zk_avg_latency\t0.5",
        "zk_min_latency\t0",
        "zk_max_latency\t7",
        "zk_connection_drop_probability\t0.0",
        "zk_avg_fsynctime\t1.5",
        "zk_min_fsynctime\t1",
        "zk_max_fsynctime\t2",
        "zk_cnt_fsynctime\t2",
        "zk_sum_fsynctime\t3",
        "zk_p50_readlatency\t2",
        "zk_p95_readlatency\t3",
        "zk_p99_readlatency\t4",
        "zk_p999_readlatency\t5",
        "zk_avg_readlatency\t2.0",
        "zk_min_readlatency\t2",
        "zk_max_readlatency\t5",
        "zk_cnt_readlatency\t9",
        "zk_sum_readlatency\t18",
        "",
    ]
)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition ``text``, parsed by the Prometheus client's parser."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_mntr_lines_are_parsed_and_sentences_skipped() -> None:
    figures = parse_mntr(MNTR)
    assert figures["zk_znode_count"] == "6"
    assert figures["zk_server_state"] == "standalone"
    assert parse_mntr("This ZooKeeper instance is not currently serving requests\n") == {}


def test_figures_keep_the_prometheus_providers_names() -> None:
    got = samples(prometheus_text(parse_mntr(MNTR)))
    assert got[(UP_METRIC, ())] == 1
    assert got[("znode_count", ())] == 6
    assert got[("num_alive_connections", ())] == 1
    assert got[("avg_latency", ())] == 0.5  # a gauge of its own in ZooKeeper
    assert got[("max_latency", ())] == 7
    # A summary: count, sum and the quantiles it has; no avg/min/max.
    assert got[("readlatency_count", ())] == 9
    assert got[("readlatency_sum", ())] == 18
    assert got[("readlatency", (("quantile", "0.5"),))] == 2
    assert got[("readlatency", (("quantile", "0.999"),))] == 5
    assert got[("fsynctime_count", ())] == 2 and got[("fsynctime_sum", ())] == 3
    names = {name for name, _labels in got}
    assert not names & {"avg_readlatency", "min_fsynctime", "cnt_readlatency", "p50_readlatency"}
    # Text values are left out.
    assert not names & {"version", "server_state"}


def test_a_failed_mntr_is_an_up_gauge_of_zero() -> None:
    for figures in (None, {}, parse_mntr("not serving")):
        assert samples(prometheus_text(figures)) == {(UP_METRIC, ()): 0}


def test_odd_names_and_values_do_not_break_the_exposition() -> None:
    text = prometheus_text(
        {"zk_9lives": "1", "zk_a-b.c": "2", "zk_nan": "NaN", "zk_big": "1e3", "other": "4"}
    )
    got = samples(text)
    assert got[("_9lives", ())] == 1
    assert got[("a_b_c", ())] == 2
    assert got[("big", ())] == 1000
    assert ("nan", ()) not in got and ("other", ()) not in got


SRVR_FOLLOWER = """Zookeeper version: 3.8.0-${mvngit.commit.id}, built on 2024-12-29 17:54 UTC
Latency min/avg/max: 0/0.0/0
Received: 3
Sent: 2
Connections: 1
Outstanding: 0
Zxid: 0x100000000
Mode: follower
Node count: 5
"""


def test_ready_once_ruok_and_a_serving_mode() -> None:
    assert server_mode(SRVR_FOLLOWER) == "follower"
    verdict = readiness("imok", SRVR_FOLLOWER)
    assert verdict.ready and verdict.reason == "serving as follower"
    assert readiness("imok", SRVR_FOLLOWER.replace("follower", "leader")).ready


def test_not_ready_says_why() -> None:
    not_serving = "This ZooKeeper instance is not currently serving requests\n"
    cases = {
        (None, None): "no answer to ruok",
        ("", None): "ruok answered ''",
        ("imok", None): "no answer to srvr",
        ("imok", not_serving): "not serving: This ZooKeeper instance",
        ("imok", ""): "empty answer to srvr",
    }
    for (ruok, srvr), reason in cases.items():
        verdict = readiness(ruok, srvr)
        assert not verdict.ready and reason in verdict.reason
