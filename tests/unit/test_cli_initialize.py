"""``stripemq initialize-cluster-metadata``'s command line: Pulsar's flags, and the one
metadata store they name (what it writes: ``tests/integration/test_initialize_cluster_metadata.py``,
``tests/unit/test_broker_cluster_metadata.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from stripemq.cli.admin_formats import ArgumentFormatError
from stripemq.cli.initialize import run_initialize


def test_initialize_names_one_store() -> None:
    from stripemq.cli.initialize import store_url
    from stripemq.cli.main import build_parser

    def parsed(*argv: str) -> Any:
        return build_parser().parse_args(["initialize-cluster-metadata", "-c", "c", *argv])

    assert store_url(parsed("--metadata-store", "zk:h:2181/x")) == "zk://h:2181/x"
    assert store_url(parsed("-zk", "h:2181")) == "zk://h:2181"
    same = parsed("-md", "zk:h:2181", "--configuration-metadata-store", "zk://h:2181")
    assert store_url(same) == "zk://h:2181"
    with pytest.raises(ArgumentFormatError, match="required"):
        store_url(parsed())
    with pytest.raises(ArgumentFormatError, match="configuration metadata"):
        store_url(parsed("-md", "zk:h:2181", "-cs", "zk:other:2181"))


def parsed(*argv: str) -> Any:
    from stripemq.cli.main import build_parser

    return build_parser().parse_args(["initialize-cluster-metadata", "-c", "c", *argv])


def test_pulsars_other_flags_are_accepted() -> None:
    args = parsed(
        "-md", "zk:h:2181", "-uw", "http://h:8080", "-bn", "8", "-te",
        "--auth-plugin", "p", "--auth-parameters", "x",
        "-pu", "pulsar://proxy:6650", "-pp", "SNI",
        "--bookkeeper-metadata-service-uri", "zk+null://h/ledgers",
        "--existing-bk-metadata-service-uri", "zk+null://h/ledgers",
        "-mscp", "/conf/md.yaml", "-cmscp", "/conf/cmd.yaml",
        "--initial-num-transaction-coordinators", "16",
    )  # fmt: skip
    assert args.default_namespace_bundle_number == 8
    assert args.web_service_url == "http://h:8080"


def test_generate_docs_prints_the_options(capsys: Any) -> None:
    assert run_initialize(parsed("-g")) == 0
    assert "--web-service-url" in capsys.readouterr().out


def test_a_bad_bundle_count_is_refused(capsys: Any) -> None:
    assert run_initialize(parsed("-md", "memory://x", "-bn", "-2")) == 2
    assert "bundle" in capsys.readouterr().err
