"""``stripemq standalone``: the embedded metadata store, one bookie and one broker in one
process, everything under one data directory.

The standalone's own settings (``StandaloneConfig``) are its command-line options; the
settings file, ``STRIPEMQ_*`` variables and ``-c`` options hold bookie and broker settings,
each going to the role that has it (to both for the few both have).

Everything HTTP is on the broker's web port: the admin API, broker and bookie metrics
(``/metrics``) and the bookie's probes (``/heartbeat``, ``/api/v1/bookie/is_ready``). The
bookie opens an HTTP port of its own only when ``stats_http_port`` is set, and a binary add
port only when ``binary_add_port`` is (its broker adds in-process).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from stripemq.bookie.config import BookieConfig
from stripemq.bookie.local_client import LocalBookieClient
from stripemq.bookie.server import BookieServer
from stripemq.broker.app import BrokerApp
from stripemq.broker.config import BrokerConfig
from stripemq.config import env_settings, load_config, read_toml, setting
from stripemq.errors import ConfigError
from stripemq.metadata import MetadataStore, create_metadata_store

log = logging.getLogger(__name__)


@dataclass
class StandaloneConfig:
    """Where the standalone keeps its data and which ports its roles listen on."""

    data_dir: str = setting(
        "data/standalone",
        "Directory of everything the standalone keeps: metadata/ (the embedded metadata "
        "store) and bookie/ (the bookie's journal and ledgers).",
        option="--data-dir",
    )
    broker_port: int = setting(
        6650,
        "Port of the broker's Pulsar binary protocol (its broker_service_port).",
        pulsar_name="brokerServicePort",
        option="--broker-port",
    )
    web_port: int = setting(
        8080,
        "Port of the broker's HTTP service (its web_service_port).",
        pulsar_name="webServicePort",
        option="--web-port",
    )
    bookie_port: int = setting(
        3181,
        "gRPC port of the bookie (its bookie_port).",
        pulsar_name="bookiePort",
        option="--bookie-port",
    )


class Standalone:
    """Start the store, then the bookie, then the broker; stop in the reverse order."""

    def __init__(
        self,
        config: StandaloneConfig,
        conf: str | None = None,
        overrides: Mapping[str, object] | None = None,
    ) -> None:
        self.config = config
        self.data_dir = Path(os.path.abspath(config.data_dir))
        self.metadata_url = f"local://{self.data_dir / 'metadata'}"
        # One file and one set of -c options for both roles: each setting goes to the role
        # that has it. As for every role, the options win over the file and -c over both.
        from_file: dict[str, object] = dict(read_toml(conf)) if conf else {}
        from_cli: dict[str, object] = dict(overrides or {})
        bookie_fields = set(BookieConfig.__dataclass_fields__)
        broker_fields = set(BrokerConfig.__dataclass_fields__)
        unknown = {*from_file, *from_cli} - bookie_fields - broker_fields
        # The bookie's own HTTP port only if asked for: by default its metrics and probes
        # are on the web port, and a second standalone on this host starts without clashing.
        self.bookie_http = "stats_http_port" in {
            *from_file,
            *from_cli,
            *env_settings(["stats_http_port"]),
        }
        if unknown:
            raise ConfigError(f"unknown settings: {', '.join(sorted(unknown))}")
        self.bookie_config = load_config(
            BookieConfig,
            None,
            {
                # Its broker adds in-process: no binary add port unless one is asked for.
                "binary_add_port": -1,
                **{k: v for k, v in from_file.items() if k in bookie_fields},
                **self.derived_bookie_settings(),
                **{k: v for k, v in from_cli.items() if k in bookie_fields},
            },
        )
        self.broker_config = load_config(
            BrokerConfig,
            None,
            {
                # One bookie: every ledger has one copy (as in Pulsar's standalone).
                "managed_ledger_default_ensemble_size": 1,
                "managed_ledger_default_write_quorum": 1,
                "managed_ledger_default_ack_quorum": 1,
                **{k: v for k, v in from_file.items() if k in broker_fields},
                **self.derived_broker_settings(),
                **{k: v for k, v in from_cli.items() if k in broker_fields},
            },
        )
        self.store: MetadataStore | None = None
        self.bookie: BookieServer | None = None
        self.broker: BrokerApp | None = None
        self.local_bookie: LocalBookieClient | None = None

    def derived_bookie_settings(self) -> dict[str, object]:
        """The bookie settings the standalone's own options decide."""
        return {
            "metadata_service_uri": self.metadata_url,
            "bookie_port": self.config.bookie_port,
            "data_dir": str(self.data_dir / "bookie"),
        }

    def derived_broker_settings(self) -> dict[str, object]:
        """The broker settings the standalone's own options decide."""
        return {
            "metadata_service_uri": self.metadata_url,
            "broker_service_port": self.config.broker_port,
            "web_service_port": self.config.web_port,
        }

    async def start(self) -> None:
        self.store = create_metadata_store(self.metadata_url)
        await self.store.start()
        try:
            self.bookie = BookieServer(
                self.bookie_config, store=self.store, serve_http=self.bookie_http
            )
            await self.bookie.start()
            # The broker reaches this bookie in-process (still journaled and fsynced); other
            # processes (auto-recovery, Spark) reach it over gRPC as in a cluster.
            local = LocalBookieClient(self.bookie.bookie_id, self.bookie.handler)
            self.local_bookie = local
            self.broker = BrokerApp(
                self.broker_config,
                store=self.store,
                extra_collectors=[self.bookie.metrics],
                local_bookies={self.bookie.bookie_id: local},
            )
            await self.broker.start()
        except BaseException:
            await self.stop()
            raise
        log.info(
            "standalone ready: broker pulsar://%s:%d, bookie %s, data in %s",
            self.broker_config.bind_address,
            self.broker_config.broker_service_port,
            self.bookie_config.bookie_id,
            self.data_dir,
        )

    async def stop(self) -> None:
        if self.broker is not None:
            await self.broker.stop()
            self.broker = None
        if self.local_bookie is not None:
            await self.local_bookie.close()
            self.local_bookie = None
        if self.bookie is not None:
            await self.bookie.stop()
            self.bookie = None
        if self.store is not None:
            await self.store.close()
            self.store = None
