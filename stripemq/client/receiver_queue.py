"""The messages a consumer has received and the application not yet taken."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable

from stripemq.client.message import Message
from stripemq.errors import AlreadyClosedError, ClientTimeoutError


class ReceiverQueue:
    """A FIFO of messages with waiting receivers; ``on_taken`` is told of each message the
    application takes, so the consumer it came through can ask the broker for more."""

    def __init__(self, on_taken: Callable[[Message], None]) -> None:
        self._items: deque[Message] = deque()
        self._mutating = threading.Lock()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._on_taken = on_taken
        self.closed = False
        self.failure: BaseException | None = None  # why receiving can no longer work
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def put(self, message: Message) -> None:
        self._items.append(message)
        self.bytes += len(message)
        self._wake_all()  # each waiter checks again: no wake-up is lost to a timeout

    def _wake_all(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def _take(self) -> Message | None:
        try:
            message = self._items.popleft()  # a facade's thread may have taken the last
        except IndexError:
            return None
        self.bytes -= len(message)
        self._on_taken(message)
        return message

    def pop_from_thread(self) -> Message | None:
        """The next message, taken from another thread than the loop's (a blocking
        facade); the caller must then have ``notify_taken`` run on the loop."""
        self._check_usable()
        with self._mutating:
            try:
                return self._items.popleft()  # atomic against the loop's appends
            except IndexError:
                return None

    def notify_taken(self, message: Message) -> None:
        self.bytes -= len(message)
        self._on_taken(message)

    def take_nowait(self) -> Message | None:
        self._check_usable()
        return self._take()

    async def take(self, timeout_s: float | None = None) -> Message:
        """The next message; ``ClientTimeoutError`` after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            self._check_usable()
            message = self._take()
            if message is not None:
                return message
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise ClientTimeoutError(f"no message within {timeout_s:g} s")
            waiter = loop.create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout(remaining):
                    await waiter
            except TimeoutError:
                pass
            finally:
                if not waiter.done():
                    waiter.cancel()

    def snapshot(self) -> list[Message]:
        """The queued messages (a copy), for looking at without taking."""
        with self._mutating:
            return list(self._items)

    def remove_if(self, predicate: Callable[[Message], bool]) -> list[Message]:
        """Drop (without telling ``on_taken``) the messages matching ``predicate``."""
        kept: deque[Message] = deque()
        removed: list[Message] = []
        with self._mutating:  # not while a facade's thread pops
            for message in self._items:
                (removed if predicate(message) else kept).append(message)
            self._items = kept
        self.bytes = sum(len(m) for m in kept)
        return removed

    def close(self) -> None:
        self.closed = True
        self._wake_all()

    def fail(self, error: BaseException) -> None:
        """Receiving cannot work any more (the consumer gave up reconnecting): waiters and
        later receivers get ``error`` once what is queued has been taken."""
        self.failure = error
        self._wake_all()

    def _check_usable(self) -> None:
        if self.closed:
            raise AlreadyClosedError("the consumer is closed")
        if self.failure is not None and not self._items:
            raise self.failure
