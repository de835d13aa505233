"""The synchronous facade: the official ``pulsar`` module's blocking API, running the
asyncio client on an event loop in a background thread."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import inspect
import logging
import re
import threading
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, TypeVar

from stripemq.client.batching import OutgoingMessage
from stripemq.client.client import AnyProducer, AsyncClient
from stripemq.client.consumer import ConsumerBase
from stripemq.client.message import Message, MessageId
from stripemq.client.options import Result
from stripemq.client.producer import notify_when_done, outgoing_message, result_of
from stripemq.client.reader import Reader as AsyncReader
from stripemq.errors import AlreadyClosedError, StripeMQError

log = logging.getLogger(__name__)

T = TypeVar("T")
_COALESCE_S = 0.0005


class _LoopThread:
    """An event loop of its own, in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._calls: collections.deque[tuple[Callable[..., Any], tuple[Any, ...]]] = (
            collections.deque()
        )
        self._drain_scheduled = False
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="stripemq-client", daemon=True
        )
        self._thread.start()

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self.loop.is_closed():
            coroutine.close()
            raise AlreadyClosedError("the client is closed")
        if self.in_loop_thread():
            coroutine.close()
            raise RuntimeError("a blocking client call from a client callback would deadlock")
        return asyncio.run_coroutine_threadsafe(self._after_calls(coroutine), self.loop).result()

    async def _after_calls(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """``coroutine``, after the calls made before it (an ack before a close)."""
        self._drain()
        return await coroutine

    def call(self, function: Callable[..., Any], *args: Any) -> None:
        """Run ``function`` on the loop soon, without waiting. Calls made while the loop
        is busy are run together, on one wake-up."""
        self._queue_call(function, args, 0.0)

    def call_coalesced(self, function: Callable[..., Any], *args: Any) -> None:
        """As ``call``, for bookkeeping that may wait a moment (acks, permits): a busy
        caller's next calls join the same wake-up of the loop."""
        self._queue_call(function, args, _COALESCE_S)

    def _queue_call(
        self, function: Callable[..., Any], args: tuple[Any, ...], delay: float
    ) -> None:
        if self.loop.is_closed():
            raise AlreadyClosedError("the client is closed")
        self._calls.append((function, args))
        if not self._drain_scheduled:
            self._drain_scheduled = True
            if delay:
                self.loop.call_soon_threadsafe(self.loop.call_later, delay, self._drain)
            else:
                self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        self._drain_scheduled = False  # first: a call appended from now on schedules again
        while self._calls:
            function, args = self._calls.popleft()
            try:
                function(*args)
            except Exception:
                log.exception("client call %s failed", getattr(function, "__name__", function))

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
            self.loop.close()


class Producer:
    """A blocking producer (``pulsar.Producer``)."""

    def __init__(self, runner: _LoopThread, impl: AnyProducer) -> None:
        self._run = runner
        self._impl = impl
        # Room in the pending queue, counted on the caller's side so that send_async
        # hands messages over without waiting for the client's thread.
        self._room = threading.Semaphore(impl.capacity)
        self._blocks = impl.config.block_if_queue_full

    def topic(self) -> str:
        return self._impl.topic()

    def producer_name(self) -> str:
        return self._impl.producer_name()

    def last_sequence_id(self) -> int:
        return self._impl.last_sequence_id()

    def is_connected(self) -> bool:
        return self._impl.is_connected()

    def send(self, content: bytes, **options: Any) -> MessageId:
        """Send and wait until durable; options as ``pulsar.Producer.send``."""
        return self._run.run(self._impl.send(content, **options))

    def send_async(
        self,
        content: bytes,
        callback: Callable[[Result, MessageId | None], Any] | None,
        **options: Any,
    ) -> None:
        """Queue the message; ``callback(result, message_id)`` runs on the client's thread
        when it is durable or failed. Blocks only while the queue is full and the producer
        was made with ``block_if_queue_full``."""
        message = outgoing_message(content, **options)  # bad arguments raise here
        if self._impl.closed:
            raise AlreadyClosedError(f"producer on {self._impl.topic_name} is closed")
        # Never block the client's own thread (a callback sending again): it would wait
        # for room that only that thread can make.
        blocking = self._blocks and not self._run.in_loop_thread()
        if not self._room.acquire(blocking=blocking):
            if callback is not None:
                callback(Result.ProducerQueueIsFull, None)
            return

        def done(result: Result, message_id: MessageId | None) -> None:
            self._room.release()
            if callback is not None:
                callback(result, message_id)

        self._run.call(self._hand_over, message, done)

    def _hand_over(self, message: OutgoingMessage, done: Callable[..., Any]) -> None:
        """On the client's thread: queue ``message`` in the producer."""
        try:
            if self._blocks:  # in line behind any message still waiting for room
                future = self._impl.send_message_in_line(message)
            else:
                future = self._impl.send_message_nowait(message)
        except StripeMQError as exc:
            done(result_of(exc), None)
            return
        notify_when_done(future, done)

    def flush(self) -> None:
        self._run.run(self._impl.flush())

    def close(self) -> None:
        self._run.run(self._impl.close())


class Consumer:
    """A blocking consumer (``pulsar.Consumer``)."""

    def __init__(
        self,
        runner: _LoopThread,
        impl: ConsumerBase,
        listener: Callable[[Consumer, Message], Any] | None = None,
        listener_threads: int = 1,
    ) -> None:
        self._run = runner
        self._impl = impl
        self._listener = listener
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._listener_task: concurrent.futures.Future[None] | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        if listener is not None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=max(1, listener_threads), thread_name_prefix="stripemq-listener"
            )
            self._listener_task = asyncio.run_coroutine_threadsafe(self._listen(), runner.loop)

    async def _listen(self) -> None:
        """Hand each message to the listener, one at a time, on a listener thread."""
        loop = asyncio.get_running_loop()
        assert self._listener is not None
        while not self._impl.closed:
            await self._resumed.wait()
            try:
                message = await self._impl.receive()
            except AlreadyClosedError:
                return
            try:
                await loop.run_in_executor(self._executor, self._listener, self, message)
            except Exception:
                log.exception("message listener failed on %r", message)

    def topic(self) -> str:
        return self._impl.topic()

    def subscription_name(self) -> str:
        return self._impl.subscription_name()

    def consumer_name(self) -> str:
        return self._impl.consumer_name()

    def is_connected(self) -> bool:
        return self._impl.is_connected()

    def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; ``TimeoutError`` (``ClientTimeoutError``) after the timeout."""
        message = self._impl.queue.pop_from_thread()  # queued already: no hand-off
        if message is not None:
            self._run.call_coalesced(self._impl.queue.notify_taken, message)
            return message
        return self._run.run(self._impl.receive(timeout_millis))

    def batch_receive(self) -> list[Message]:
        return self._run.run(self._impl.batch_receive())

    def acknowledge(self, target: Message | MessageId) -> None:
        """Acknowledge (sent grouped, in the background); a message of another topic
        raises here."""
        consumer, message_id = self._impl.ack_target(target)
        self._run.call_coalesced(consumer.ack_individual, message_id)

    def acknowledge_cumulative(self, target: Message | MessageId) -> None:
        consumer, message_id = self._impl.cumulative_ack_target(target)
        self._run.call_coalesced(consumer.ack_cumulative, message_id)

    def negative_acknowledge(self, target: Message | MessageId) -> None:
        consumer, message_id = self._impl.ack_target(target)
        self._run.call(consumer.nack, message_id)

    def reconsume_later(
        self, message: Message, delay: Any, properties: dict[str, str] | None = None
    ) -> None:
        """Send ``message`` to the retry-letter topic for another try after ``delay``."""
        self._run.run(self._impl.reconsume_later(message, delay, properties))

    def redeliver_unacknowledged_messages(self) -> None:
        self._run.run(_call(self._impl.redeliver_unacknowledged_messages))

    def seek(self, target: MessageId | int) -> None:
        self._run.run(self._impl.seek(target))

    def get_last_message_id(self) -> MessageId:
        return self._run.run(self._impl.get_last_message_id())

    def pause_message_listener(self) -> None:
        self._run.call(self._resumed.clear)

    def resume_message_listener(self) -> None:
        self._run.call(self._resumed.set)

    def unsubscribe(self) -> None:
        self._run.run(self._impl.unsubscribe())
        self._stop_listener()

    def close(self) -> None:
        self._run.run(self._impl.close())
        self._stop_listener()

    def _stop_listener(self) -> None:
        if self._listener_task is not None:
            self._listener_task.cancel()
        if self._executor is not None:
            self._executor.shutdown(wait=False)


async def _call(function: Callable[[], T]) -> T:
    return function()


class Reader:
    """A blocking reader (``pulsar.Reader``)."""

    def __init__(self, runner: _LoopThread, impl: AsyncReader) -> None:
        self._run = runner
        self._impl = impl

    def topic(self) -> str:
        return self._impl.topic()

    def read_next(self, timeout_millis: int | None = None) -> Message:
        return self._run.run(self._impl.read_next(timeout_millis))

    def has_message_available(self) -> bool:
        return self._run.run(self._impl.has_message_available())

    def seek(self, target: MessageId | int) -> None:
        self._run.run(self._impl.seek(target))

    def is_connected(self) -> bool:
        return self._impl.is_connected()

    def close(self) -> None:
        self._run.run(self._impl.close())


_SUBSCRIBE = inspect.signature(AsyncClient.subscribe)


class Client:
    """A blocking client (``pulsar.Client``): same arguments (``authentication`` an
    ``AuthenticationToken``) and methods."""

    def __init__(self, service_url: str, *args: Any, **options: Any) -> None:
        self._run = _LoopThread()
        self._listening: list[Consumer] = []
        try:
            self._impl = self._run.run(_make_client(service_url, args, options))
        except BaseException:
            self._run.stop()
            raise

    def create_producer(self, topic: str, *args: Any, **options: Any) -> Producer:
        """Arguments (positional too) as ``pulsar.Client.create_producer``."""
        impl = self._run.run(self._impl.create_producer(topic, *args, **options))
        return Producer(self._run, impl)

    def subscribe(
        self,
        topic: str | list[str] | re.Pattern[str],
        subscription_name: str,
        *args: Any,
        **options: Any,
    ) -> Consumer:
        """Arguments (positional too) as ``pulsar.Client.subscribe``; a
        ``message_listener(consumer, message)`` runs on a listener thread."""
        bound = _SUBSCRIBE.bind(self._impl, topic, subscription_name, *args, **options)
        arguments = dict(bound.arguments)
        arguments.pop("self")
        listener = arguments.pop("message_listener", None)
        impl = self._run.run(self._impl.subscribe(**arguments))
        consumer = Consumer(self._run, impl, listener, self._impl.message_listener_threads)
        if listener is not None:
            self._listening.append(consumer)
        return consumer

    def create_reader(
        self, topic: str, start_message_id: MessageId, *args: Any, **options: Any
    ) -> Reader:
        """Arguments (positional too) as ``pulsar.Client.create_reader``."""
        impl = self._run.run(self._impl.create_reader(topic, start_message_id, *args, **options))
        return Reader(self._run, impl)

    def get_topic_partitions(self, topic: str) -> list[str]:
        return self._run.run(self._impl.get_topic_partitions(topic))

    def close(self) -> None:
        if self._run.loop.is_closed():
            return
        try:
            self._run.run(self._impl.close())
        finally:
            for consumer in self._listening:
                consumer._stop_listener()
            self._run.stop()

    def shutdown(self) -> None:
        self.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


async def _make_client(
    service_url: str, args: tuple[Any, ...], options: dict[str, Any]
) -> AsyncClient:
    return AsyncClient(service_url, *args, **options)
