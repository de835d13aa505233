"""``stripemq autorecovery --status|--enable|--disable`` act on a cluster's store only."""

from __future__ import annotations

import pytest

from stripemq.cli.main import main


@pytest.mark.parametrize("flag", ["--status", "--enable", "--disable"])
def test_without_a_metadata_store_the_flags_are_refused(
    flag: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The default memory:// store is this process's own and empty: "--status" would report
    nothing under-replicated, which an operator scaling bookies down would believe."""
    monkeypatch.delenv("STRIPEMQ_METADATA_SERVICE_URI", raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["autorecovery", flag])
    assert exited.value.code == 2
    assert "give --metadata zk://" in caplog.text
