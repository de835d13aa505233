"""``stripemq shell`` against a real cluster, run as a user would run it."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from stripemq.testing.cluster import BookieCluster
from stripemq.testing.process import run_stripemq

pytestmark = pytest.mark.integration


async def shell(url: str, *args: str) -> str:
    code, out, err = await run_stripemq("shell", "--metadata", url, *args, timeout=120)
    assert code == 0, err
    return out


async def test_simpletest_then_inspect_and_delete(zookeeper_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    url = zookeeper_server.url(f"/shell-{uuid.uuid4().hex[:8]}")
    async with BookieCluster(url, tmp_path, 3) as cluster:
        out = await shell(url, "simpletest", "-E", "3", "-Qw", "2", "-Qa", "2", "-n", "50")
        assert "wrote 50 entries" in out and "read them back" in out
        listed = (await shell(url, "listbookies")).splitlines()
        assert sorted(line.split("\t")[0] for line in listed) == sorted(
            b.address for b in cluster.bookies
        )
        ledger_id = int((await shell(url, "listledgers")).split()[0])
        metadata = json.loads(await shell(url, "ledgermetadata", str(ledger_id)))
        assert metadata["state"] == "CLOSED" and metadata["last_entry_id"] == 49
        assert metadata["write_quorum_size"] == 2
        lines = (await shell(url, "readledger", str(ledger_id), "--last", "2")).splitlines()
        assert lines == ["0\tb'entry 0'", "1\tb'entry 1'", "2\tb'entry 2'"]
        await shell(url, "deleteledger", str(ledger_id))
        assert (await shell(url, "listledgers")).strip() == ""
