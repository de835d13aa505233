"""Where a broker test's consumer messages go when no connection is wanted."""

from __future__ import annotations

from stripemq.proto import pulsar_api_pb2 as pb


class NullSink:
    """A connection that drops everything (acks send nothing); override what a test reads."""

    def send_message(
        self,
        consumer_id: int,
        message_id: pb.MessageIdData,
        redelivery_count: int,
        entry: bytes,
        ack_set: list[int] | None = None,
    ) -> None:
        pass

    def flush_messages(self) -> None:
        pass

    def send_active_change(self, consumer_id: int, is_active: bool) -> None:
        pass

    def send_reached_end_of_topic(self, consumer_id: int) -> None:
        pass

    def close_consumer(self, consumer_id: int) -> None:
        pass

    def close_producer(self, producer_id: int) -> None:
        pass

    def publish_rate_changed(self) -> None:
        pass

    @property
    def is_active(self) -> bool:
        return True
