"""The consumer's receiver queue (``client.receiver_queue``): takes in order, timeouts
that lose nothing, concurrent waiters, and closing."""

from __future__ import annotations

import asyncio
import time

import pytest

from stripemq.client.message import Message, MessageId
from stripemq.client.receiver_queue import ReceiverQueue
from stripemq.errors import AlreadyClosedError, ClientError, ClientTimeoutError


def _message(n: int, data: bytes = b"x") -> Message:
    return Message(
        _data=data,
        _message_id=MessageId(ledger_id=1, entry_id=n),
        _topic="persistent://public/default/t",
        _properties={},
        _partition_key=None,
        _ordering_key=None,
        _publish_timestamp=0,
        _event_timestamp=0,
        _redelivery_count=0,
        _producer_name="p",
    )


class Taken:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    def __call__(self, message: Message) -> None:
        self.messages.append(message)


async def test_take_returns_messages_in_order_and_reports_each() -> None:
    taken = Taken()
    queue = ReceiverQueue(taken)
    messages = [_message(i, b"x" * (i + 1)) for i in range(3)]
    for m in messages:
        queue.put(m)
    assert len(queue) == 3 and queue.bytes == 6
    assert await queue.take() is messages[0]
    assert queue.bytes == 5
    assert queue.take_nowait() is messages[1]
    assert await queue.take(timeout_s=0) is messages[2]
    assert taken.messages == messages
    assert len(queue) == 0 and queue.bytes == 0
    assert queue.take_nowait() is None


async def test_take_waits_for_a_message_put_later() -> None:
    taken = Taken()
    queue = ReceiverQueue(taken)
    task = asyncio.create_task(queue.take(timeout_s=5))
    await asyncio.sleep(0)  # one loop turn: the take runs until it waits
    assert not task.done()
    message = _message(1)
    queue.put(message)
    assert await asyncio.wait_for(task, 1) is message
    assert taken.messages == [message]


async def test_take_times_out_with_a_client_timeout_error() -> None:
    queue = ReceiverQueue(Taken())
    started = time.monotonic()
    with pytest.raises(ClientTimeoutError) as info:
        await queue.take(timeout_s=0.05)
    assert time.monotonic() - started >= 0.04
    assert isinstance(info.value, TimeoutError)
    assert isinstance(info.value, ClientError)
    with pytest.raises(TimeoutError):  # catchable as the builtin
        await queue.take(timeout_s=0)
    # The queue still works afterwards.
    message = _message(1)
    queue.put(message)
    assert await queue.take(timeout_s=0.05) is message


async def test_a_timed_out_take_loses_no_message() -> None:
    queue = ReceiverQueue(Taken())
    with pytest.raises(ClientTimeoutError):
        await queue.take(timeout_s=0.01)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(queue.take(), 0.01)
    message = _message(1)
    queue.put(message)
    assert len(queue) == 1
    assert queue.take_nowait() is message


async def test_a_cancelled_take_leaves_the_message_queued() -> None:
    queue = ReceiverQueue(Taken())
    task = asyncio.create_task(queue.take())
    await asyncio.sleep(0)
    message = _message(1)
    queue.put(message)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert queue.take_nowait() is message


async def test_concurrent_waiters_are_all_served() -> None:
    taken = Taken()
    queue = ReceiverQueue(taken)
    waiters = [asyncio.create_task(queue.take(timeout_s=5)) for _ in range(10)]
    await asyncio.sleep(0)
    messages = [_message(i) for i in range(10)]
    for i, m in enumerate(messages):
        queue.put(m)
        if i % 3 == 0:
            await asyncio.sleep(0)
    got = await asyncio.wait_for(asyncio.gather(*waiters), 2)
    assert sorted(m.message_id() for m in got) == [m.message_id() for m in messages]
    assert len({id(m) for m in got}) == 10
    assert sorted(m.message_id() for m in taken.messages) == [m.message_id() for m in messages]
    assert len(queue) == 0 and queue.bytes == 0


async def test_concurrent_waiters_with_timeouts_all_served_as_messages_trickle_in() -> None:
    queue = ReceiverQueue(Taken())
    # Each message wakes every waiter; those that lose the race wait again, with what is
    # left of their timeout.
    waiters = [asyncio.create_task(queue.take(timeout_s=2.0)) for _ in range(5)]
    await asyncio.sleep(0)
    for i in range(5):
        await asyncio.sleep(0.005)
        queue.put(_message(i))
    got = await asyncio.wait_for(asyncio.gather(*waiters), 2)
    assert sorted(m.message_id().entry_id() for m in got) == [0, 1, 2, 3, 4]


async def test_remove_if_drops_without_reporting_them_taken() -> None:
    taken = Taken()
    queue = ReceiverQueue(taken)
    messages = [_message(i, b"y" * (i + 1)) for i in range(5)]
    for m in messages:
        queue.put(m)
    removed = queue.remove_if(lambda m: m.message_id().entry_id() % 2 == 0)
    assert removed == [messages[0], messages[2], messages[4]]
    assert taken.messages == []
    assert len(queue) == 2 and queue.bytes == 2 + 4
    assert await queue.take() is messages[1]
    assert await queue.take() is messages[3]
    assert taken.messages == [messages[1], messages[3]]
    assert queue.remove_if(lambda m: True) == []


async def test_close_wakes_every_waiter_with_already_closed() -> None:
    queue = ReceiverQueue(Taken())
    waiters = [asyncio.create_task(queue.take()) for _ in range(3)]
    timed = asyncio.create_task(queue.take(timeout_s=10))
    await asyncio.sleep(0)  # one loop turn: every take runs until it waits
    queue.close()
    results = await asyncio.wait_for(asyncio.gather(*waiters, timed, return_exceptions=True), 1)
    assert all(isinstance(r, AlreadyClosedError) for r in results), results


async def test_a_closed_queue_refuses_takes_even_with_messages() -> None:
    taken = Taken()
    queue = ReceiverQueue(taken)
    queue.put(_message(1))
    queue.close()
    assert queue.closed
    with pytest.raises(AlreadyClosedError):
        await queue.take()
    with pytest.raises(AlreadyClosedError):
        queue.take_nowait()
    assert taken.messages == []
