"""End-to-end encryption with the official ``pulsar-client`` against a real ``stripemq
standalone``: the broker stores and delivers what the producer encrypted without reading
it, and a namespace that requires encryption (``encryptionRequired``) refuses producers
that would not encrypt, with Pulsar's error (which the C++ client retries until its
operation timeout)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from stripemq.testing.rest import rest
from stripemq.testing.standalone import StandaloneProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def namespace(standalone: StandaloneProcess) -> Iterator[str]:
    name = f"public/secret-{uuid.uuid4().hex[:8]}"
    assert rest(standalone.web_url, "PUT", f"/admin/v2/namespaces/{name}")[0] == 204
    yield name


@pytest.fixture
def keys(tmp_path: Path) -> pulsar.CryptoKeyReader:
    """An RSA key pair in PEM files, as the client's key reader takes them."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private_path, public_path = tmp_path / "private.pem", tmp_path / "public.pem"
    private_path.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    public_path.write_bytes(
        private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pulsar.CryptoKeyReader(str(public_path), str(private_path))


def test_encrypted_messages_pass_through_and_plain_producers_are_refused(
    standalone: StandaloneProcess,
    client: pulsar.Client,
    namespace: str,
    keys: pulsar.CryptoKeyReader,
) -> None:
    topic = f"persistent://{namespace}/orders"
    path = f"/admin/v2/namespaces/{namespace}/encryptionRequired"
    assert rest(standalone.web_url, "POST", path, True)[0] == 204

    # The C++ client takes the broker's MetadataError ("Encryption is required in ...")
    # for a passing one and retries until its operation timeout, as it does with Pulsar.
    with pytest.raises(pulsar.Timeout):
        client.create_producer(topic)
    consumer = client.subscribe(topic, "readers", crypto_key_reader=keys)
    producer = client.create_producer(
        topic, encryption_key="orders-key", crypto_key_reader=keys, batching_enabled=False
    )
    for i in range(3):
        producer.send(f"secret {i}".encode())
    got = [consumer.receive(timeout_millis=10_000) for _ in range(3)]
    assert [m.data() for m in got] == [b"secret 0", b"secret 1", b"secret 2"]
    for message in got:
        consumer.acknowledge(message)
    stats = rest(standalone.web_url, "GET", f"/admin/v2/persistent/{namespace}/orders/stats")
    assert stats[1]["msgInCounter"] == 3
    producer.close()
    consumer.close()
