"""stripemq's Python client for the Pulsar binary protocol, with the official
``pulsar-client`` API: switching is a change of import.

    from stripemq.client import Client
    client = Client("pulsar://localhost:6650")
    producer = client.create_producer("my-topic")
    producer.send(b"hello")

The asyncio API with the same names is ``stripemq.client.aio``. Token authentication and
TLS are the official client's too:

    client = Client("pulsar+ssl://broker:6651",
                    authentication=AuthenticationToken(token),
                    tls_trust_certs_file_path="ca.pem")
"""

from stripemq.client.auth import AuthenticationToken
from stripemq.client.message import Message, MessageId
from stripemq.client.options import (
    BatchingType,
    BatchReceivePolicy,
    CompressionType,
    ConsumerBatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    ConsumerType,
    HashingScheme,
    InitialPosition,
    KeySharedMode,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RegexSubscriptionMode,
    Result,
)
from stripemq.client.sync import Client, Consumer, Producer, Reader
from stripemq.errors import (
    AlreadyClosedError,
    AuthenticationError,
    AuthorizationError,
    ClientError,
    ConnectError,
    ConsumerBusyError,
    CumulativeAcknowledgementNotAllowedError,
    InvalidConfigurationError,
    InvalidMessageError,
    InvalidTopicNameError,
    MessageTooBigError,
    NotAllowedError,
    ProducerBusyError,
    ProducerFencedError,
    ProducerQueueIsFullError,
    SubscriptionNotFoundError,
    TopicLookupError,
    TopicNotFoundError,
    TopicTerminatedError,
)
from stripemq.errors import ClientTimeoutError as TimeoutError

__all__ = [
    "AlreadyClosed",
    "AlreadyClosedError",
    "AuthenticationError",
    "AuthenticationToken",
    "AuthorizationError",
    "BatchReceivePolicy",
    "BatchingType",
    "Client",
    "ClientError",
    "CompressionType",
    "ConnectError",
    "Consumer",
    "ConsumerBatchReceivePolicy",
    "ConsumerBusy",
    "ConsumerBusyError",
    "ConsumerDeadLetterPolicy",
    "ConsumerKeySharedPolicy",
    "ConsumerType",
    "CumulativeAcknowledgementNotAllowedError",
    "HashingScheme",
    "InitialPosition",
    "InvalidConfigurationError",
    "InvalidMessageError",
    "InvalidTopicNameError",
    "KeySharedMode",
    "Message",
    "MessageId",
    "MessageTooBigError",
    "NotAllowedError",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "ProducerBusyError",
    "ProducerFencedError",
    "ProducerQueueIsFullError",
    "Reader",
    "RegexSubscriptionMode",
    "Result",
    "SubscriptionNotFoundError",
    "TimeoutError",
    "TopicLookupError",
    "TopicNotFoundError",
    "TopicTerminatedError",
]
