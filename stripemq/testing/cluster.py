"""Several real bookie processes on one metadata service, for tests and benchmarks."""

from __future__ import annotations

import asyncio
from pathlib import Path

from stripemq.bookie.registration import AVAILABLE
from stripemq.metadata import MetadataStore, create_metadata_store
from stripemq.testing.bookie import BookieProcess


class BookieCluster:
    """``count`` bookies (``stripemq bookie`` processes) registered under ``metadata_url``."""

    def __init__(
        self,
        metadata_url: str,
        base_dir: Path,
        count: int,
        *,
        settings: dict[str, object] | None = None,
        racks: list[str] | None = None,
    ) -> None:
        self.metadata_url = metadata_url
        self.base_dir = Path(base_dir)
        self.settings = settings or {}
        self.bookies: list[BookieProcess] = []
        self._racks = racks
        for _ in range(count):
            self._new_process()

    def _new_process(self) -> BookieProcess:
        index = len(self.bookies)
        settings = dict(self.settings)
        if self._racks:
            settings["rack"] = self._racks[index % len(self._racks)]
        bookie = BookieProcess(
            self.metadata_url, self.base_dir / f"bookie-{index}", settings=settings
        )
        self.bookies.append(bookie)
        return bookie

    def by_address(self, address: str) -> BookieProcess:
        for bookie in self.bookies:
            if bookie.address == address:
                return bookie
        raise KeyError(address)

    async def start(self) -> None:
        await asyncio.gather(*(b.start() for b in self.bookies))
        await self.wait_registered([b.address for b in self.bookies])

    async def add_bookie(self) -> BookieProcess:
        bookie = self._new_process()
        await bookie.start()
        await self.wait_registered([bookie.address])
        return bookie

    async def wait_registered(self, addresses: list[str], timeout: float = 30.0) -> None:
        """Until every one of ``addresses`` is listed as a writable bookie."""
        store: MetadataStore = create_metadata_store(self.metadata_url)
        await store.start()
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while not set(addresses) <= set(await store.children(AVAILABLE)):
                if loop.time() > deadline:
                    raise TimeoutError(f"bookies {addresses} did not register")
                await asyncio.sleep(0.05)
        finally:
            await store.close()

    def stop(self) -> None:
        for bookie in self.bookies:
            bookie.terminate(timeout=10)

    async def __aenter__(self) -> BookieCluster:
        try:
            await self.start()
        except BaseException:
            self.kill_all()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.kill_all()

    def kill_all(self) -> None:
        for bookie in self.bookies:
            bookie.kill()
