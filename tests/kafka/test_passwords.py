"""Dynamic passwords in the migration, against Kafka's own password encoder (server-common 3.9.2,
run by ``PasswordCodec.java``): what kraftsim encrypts Kafka decrypts and the other way round, for
both ciphers Kafka offers; a migration with ``password.encoder.secret`` copies ZooKeeper's
encrypted passwords into records in the clear and dual-writes new ones encrypted."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraftsim.migration import zk_layout as L
from kraftsim.migration.driver import DriverState
from kraftsim.migration.passwords import EncryptingCodec, PasswordError
from kraftsim.migration.seed import SeedSpec, seed
from kraftsim.rpc import registry
from kraftsim.rpc.api_keys import ApiKey
from tests import harness
from tests.kafka.harness import java_command
from tests.kafka.provision import kafka
from tests.test_migration import driver_reaches, dual_writing, image_records
from tests.zookeeper import ZooKeeper, running

pytestmark = pytest.mark.kafka
IAC = registry.request_class(ApiKey.INCREMENTAL_ALTER_CONFIGS)
SECRET = "encoder-secret"
PASSWORDS = ["changeit", "", "pässwörd with spaces, commas: and colons", "🙂 outside the BMP", "x" * 300]


def kafka_codec(cipher: str, lines: list[tuple[str, str]], secret: str = SECRET) -> list[str]:
    """Kafka's EncryptingPasswordEncoder run on ("encode"|"decode", text) lines."""
    cmd = java_command(kafka(), str(Path(__file__).with_name("PasswordCodec.java")), secret, cipher, "128", "4096")
    r = subprocess.run(cmd, input="".join(f"{op}\t{text}\n" for op, text in lines), capture_output=True,
                       text=True, encoding="utf-8", timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.splitlines()


@pytest.mark.parametrize("cipher", ["AES/CBC/PKCS5Padding", "AES/GCM/NoPadding"])
def test_kafka_and_kraftsim_decrypt_each_others_passwords(cipher: str) -> None:
    ours = EncryptingCodec(SECRET, cipher=cipher)
    mine = [ours.encode(p) for p in PASSWORDS]
    got = kafka_codec(cipher, [("decode", e) for e in mine] + [("encode", p) for p in PASSWORDS])
    assert got[:len(PASSWORDS)] == PASSWORDS  # Kafka decrypts ours
    assert [ours.decode(e) for e in got[len(PASSWORDS):]] == PASSWORDS  # we decrypt Kafka's
    assert len(set(mine)) == len(mine) and mine[0] != ours.encode(PASSWORDS[0])  # a fresh salt each time
    with pytest.raises(PasswordError, match="could not be decoded"):
        EncryptingCodec("another-secret", cipher=cipher).decode(got[len(PASSWORDS)])


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeper]:
    yield from running(tmp_path_factory.mktemp("zookeeper"))


async def test_the_migration_decrypts_and_encrypts_dynamic_passwords(tmp_path: Path, zookeeper: ZooKeeper) -> None:
    """Broker 1's dynamic configs in ZooKeeper hold a password Kafka encrypted: the copy writes
    it in the clear (as Kafka's copy does), a password set through kraftsim afterwards reaches
    ZooKeeper encrypted (Kafka decrypts it), and the reconcile of a restart leaves both alone."""
    root: Any = zookeeper.client()
    root.ensure_path("/passwords")
    client: Any = None
    try:
        from kazoo.client import KazooClient

        client = KazooClient(hosts=zookeeper.connect + "/passwords", timeout=10)
        client.start(timeout=10)
        seed(client, SeedSpec(brokers=1, topics=1, partitions=1, replication_factor=1, users=0))
        [encrypted] = kafka_codec("AES/CBC/PKCS5Padding", [("encode", "truststore-secret")])
        path = L.config_path(L.BROKER_CONFIG, "1")
        client.ensure_path(path)
        client.set(path, L.encode_config({"listener.name.internal.ssl.truststore.password": encrypted,
                                          "log.cleaner.threads": "2"}))
        async with dual_writing(tmp_path, zookeeper.connect + "/passwords", password_encoder_secret=SECRET) as c:
            copied = {r.name: r.value for r in image_records(c)["ConfigRecord"] if r.resource_type == 4 and r.resource_name == "1"}
            assert copied == {"listener.name.internal.ssl.truststore.password": "truststore-secret",
                              "log.cleaner.threads": "2"}
            r = await c.req(IAC(resources=[IAC.AlterConfigsResource(resource_type=4, resource_name="1", configs=[
                IAC.AlterableConfig(name="listener.name.internal.ssl.key.password", config_operation=0,
                                    value="key-secret")])], validate_only=False), 1)
            assert r.responses[0].error_code == 0, r

            def written() -> dict[str, str] | None:
                props = L.decode_config(path, client.get(path)[0])
                return props if "listener.name.internal.ssl.key.password" in props else None

            props = await harness.poll_until(written, 10)
            assert isinstance(props, dict)
            key = props["listener.name.internal.ssl.key.password"]
            assert key.startswith("keyFactoryAlgorithm:PBKDF2WithHmacSHA512,cipherAlgorithm:AES/CBC/PKCS5Padding,")
            assert kafka_codec("AES/CBC/PKCS5Padding", [
                ("decode", key), ("decode", props["listener.name.internal.ssl.truststore.password"])]) == [
                "key-secret", "truststore-secret"]
            version = client.get(path)[1].version
        await c.start()  # in MIGRATION: the reconcile compares the passwords in the clear
        try:
            await driver_reaches(c, DriverState.DUAL_WRITE)
            assert client.get(path)[1].version == version
        finally:
            await c.stop()
    finally:
        if client is not None:
            client.stop()
            client.close()
        root.stop()
        root.close()
