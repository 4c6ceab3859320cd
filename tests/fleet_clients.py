"""Three Python admin clients driven through a fleet's client listener, the same way: kafka-python's
KafkaAdminClient, aiokafka's AIOKafkaAdminClient and confluent-kafka's AdminClient. Each adapter
does what a user does (create, describe and delete topics, add partitions, alter and describe
configs) with that client's own API; the tests check each change in the controller's log."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol


class Admin(Protocol):
    async def create_topic(self, name: str, partitions: int, replication: int) -> None: ...

    async def describe_topic(self, name: str) -> dict[int, int]: ...  # partition -> leader

    async def add_partitions(self, name: str, total: int) -> None: ...

    async def alter_config(self, name: str, key: str, value: str) -> None: ...

    async def describe_config(self, name: str, key: str) -> str: ...

    async def delete_topic(self, name: str) -> None: ...

    async def close(self) -> None: ...


class KafkaPythonAdmin:
    """kafka-python 3.0: a blocking client, run in a thread."""

    def __init__(self, bootstrap: str) -> None:
        from kafka.admin import KafkaAdminClient

        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000,
                                      client_id="kafka-python-admin")

    async def _run(self, fn: Any, *args: Any, **kw: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kw)

    async def create_topic(self, name: str, partitions: int, replication: int) -> None:
        from kafka.admin import NewTopic

        r = await self._run(self.admin.create_topics, [NewTopic(name, partitions, replication)])
        assert all(t["error_code"] == 0 for t in r["topics"]), r

    async def describe_topic(self, name: str) -> dict[int, int]:
        r = await self._run(self.admin.describe_topics, [name])
        assert r[0]["error_code"] == 0, r
        return {p["partition_index"]: p["leader_id"] for p in r[0]["partitions"]}

    async def add_partitions(self, name: str, total: int) -> None:
        from kafka.admin import NewPartitions

        r = await self._run(self.admin.create_partitions, {name: NewPartitions(total)})
        assert all(t.error_code == 0 for t in r.results), r

    async def alter_config(self, name: str, key: str, value: str) -> None:
        from kafka.admin import ConfigResource, ConfigResourceType

        r = await self._run(self.admin.alter_configs, [ConfigResource(ConfigResourceType.TOPIC, name,
                                                                      configs={key: value})])
        assert r == {"topic": {name: "OK"}}, r

    async def describe_config(self, name: str, key: str) -> str:
        from kafka.admin import ConfigResource, ConfigResourceType

        r = await self._run(self.admin.describe_configs, [ConfigResource(ConfigResourceType.TOPIC, name,
                                                                         configs=[key])], config_filter="all")
        return str(r["topic"][name][key]["value"])

    async def delete_topic(self, name: str) -> None:
        r = await self._run(self.admin.delete_topics, [name])
        assert all(t["error_code"] == 0 for t in r["topics"]), r

    async def upsert_scram(self, user: str, mechanism: int, password: str, iterations: int) -> None:
        from kafka.admin import ScramMechanism, UserScramCredentialUpsertion

        r = await self._run(self.admin.alter_user_scram_credentials, [
            UserScramCredentialUpsertion(user, ScramMechanism(mechanism), password, iterations=iterations)])
        assert r == {user: None}, r

    async def delete_scram(self, user: str, mechanism: int) -> None:
        from kafka.admin import ScramMechanism, UserScramCredentialDeletion

        r = await self._run(self.admin.alter_user_scram_credentials, [
            UserScramCredentialDeletion(user, ScramMechanism(mechanism))])
        assert r == {user: None}, r

    async def allow_read(self, principal: str, topic: str) -> None:
        from kafka.admin import ACL, ACLOperation, ACLPermissionType, ResourcePattern, ResourceType

        acl = ACL(principal, "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                  ResourcePattern(ResourceType.TOPIC, topic))
        r = await self._run(self.admin.create_acls, [acl])
        assert not r["failed"], r

    async def readers(self, topic: str) -> list[str]:
        from kafka.admin import (
            ACLFilter,
            ACLOperation,
            ACLPermissionType,
            ACLResourcePatternType,
            ResourcePatternFilter,
            ResourceType,
        )

        flt = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                        ResourcePatternFilter(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL))
        acls, error = await self._run(self.admin.describe_acls, flt)
        assert error.errno == 0, error
        return sorted(a.principal for a in acls if a.operation == ACLOperation.READ)

    async def scram_mechanisms(self, user: str) -> list[str]:
        r = await self._run(self.admin.describe_user_scram_credentials, [user])
        assert r[user]["error"] is None, r
        return sorted(info["mechanism"].name for info in r[user]["credential_infos"])

    async def close(self) -> None:
        await self._run(self.admin.close)


class AiokafkaAdmin:
    def __init__(self, bootstrap: str) -> None:
        from aiokafka.admin import AIOKafkaAdminClient

        self.admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000,
                                         client_id="aiokafka-admin")
        self.started = False

    async def _start(self) -> Any:
        if not self.started:
            await self.admin.start()
            self.started = True
        return self.admin

    async def create_topic(self, name: str, partitions: int, replication: int) -> None:
        from aiokafka.admin import NewTopic

        r = await (await self._start()).create_topics([NewTopic(name, partitions, replication)])
        errors = [t[1] for t in r.topic_errors] if hasattr(r, "topic_errors") else [t[1] for t in r.topics]
        assert errors == [0], r

    async def describe_topic(self, name: str) -> dict[int, int]:
        r = await (await self._start()).describe_topics([name])
        assert r[0]["error_code"] == 0, r
        return {p["partition"]: p["leader"] for p in r[0]["partitions"]}

    async def add_partitions(self, name: str, total: int) -> None:
        from aiokafka.admin import NewPartitions

        r = await (await self._start()).create_partitions({name: NewPartitions(total)})
        assert all(t[1] == 0 for t in r.topic_errors), r

    async def alter_config(self, name: str, key: str, value: str) -> None:
        from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

        r = await (await self._start()).alter_configs([ConfigResource(ConfigResourceType.TOPIC, name,
                                                                      configs={key: value})])
        codes = [res[0] for resp in r for res in resp.resources]
        assert codes == [0], r

    async def describe_config(self, name: str, key: str) -> str:
        from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

        r = await (await self._start()).describe_configs([ConfigResource(ConfigResourceType.TOPIC, name,
                                                                         configs={key: None})])
        for resp in r:
            for res in resp.to_object()["resources"]:
                assert res["error_code"] == 0, res
                for entry in res["config_entries"]:
                    if entry["config_names"] == key:
                        return str(entry["config_value"])
        raise AssertionError(f"{key} not in {r}")

    async def delete_topic(self, name: str) -> None:
        r = await (await self._start()).delete_topics([name])
        assert all(t[1] == 0 for t in r.topic_error_codes), r

    async def close(self) -> None:
        if self.started:
            await self.admin.close()


class ConfluentAdmin:
    """confluent-kafka (librdkafka): futures resolved in librdkafka's threads."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "confluent-admin",
                                  "socket.timeout.ms": 20_000})

    @staticmethod
    async def _all(futures: dict[Any, Any]) -> dict[Any, Any]:
        return {k: await asyncio.to_thread(f.result, 30) for k, f in futures.items()}

    async def create_topic(self, name: str, partitions: int, replication: int) -> None:
        from confluent_kafka.admin import NewTopic

        await self._all(self.admin.create_topics([NewTopic(name, partitions, replication)], request_timeout=20))

    async def describe_topic(self, name: str) -> dict[int, int]:
        from confluent_kafka import TopicCollection

        r = await self._all(self.admin.describe_topics(TopicCollection([name]), request_timeout=20))
        desc = r[name]
        return {p.id: p.leader.id if p.leader is not None else -1 for p in desc.partitions}

    async def add_partitions(self, name: str, total: int) -> None:
        from confluent_kafka.admin import NewPartitions

        await self._all(self.admin.create_partitions([NewPartitions(name, total)], request_timeout=20))

    async def alter_config(self, name: str, key: str, value: str) -> None:
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

        res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
        await self._all(self.admin.incremental_alter_configs([res], request_timeout=20))

    async def describe_config(self, name: str, key: str) -> str:
        from confluent_kafka.admin import ConfigResource, ResourceType

        r = await self._all(self.admin.describe_configs([ConfigResource(ResourceType.TOPIC, name)],
                                                        request_timeout=20))
        entries = next(iter(r.values()))
        return str(entries[key].value)

    async def delete_topic(self, name: str) -> None:
        await self._all(self.admin.delete_topics([name], request_timeout=20))

    async def upsert_scram(self, user: str, mechanism: int, password: str, iterations: int) -> None:
        from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        info = ScramCredentialInfo(ScramMechanism(mechanism), iterations)
        await self._all(self.admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion(user, info, password.encode())], request_timeout=20))

    async def allow_read(self, principal: str, topic: str) -> None:
        from confluent_kafka.admin import (
            AclBinding,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*",
                             AclOperation.READ, AclPermissionType.ALLOW)
        await self._all(self.admin.create_acls([binding], request_timeout=20))

    async def readers(self, topic: str) -> list[str]:
        from confluent_kafka.admin import (
            AclBindingFilter,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        flt = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
                               AclOperation.ANY, AclPermissionType.ANY)
        bindings = await asyncio.to_thread(self.admin.describe_acls(flt, request_timeout=20).result, 30)
        return sorted(b.principal for b in bindings if b.operation == AclOperation.READ)

    async def scram_mechanisms(self, user: str) -> list[str]:
        r = await self._all(self.admin.describe_user_scram_credentials([user], request_timeout=20))
        return sorted(info.mechanism.name for info in r[user].scram_credential_infos)

    async def close(self) -> None:
        return None


CLIENTS: dict[str, type[Any]] = {"kafka-python": KafkaPythonAdmin, "aiokafka": AiokafkaAdmin,
                                 "confluent-kafka": ConfluentAdmin}


async def until(check: Any, timeout: float = 30, what: str = "") -> Any:
    """Poll an async check with a deadline. The fleet's image may trail the controller a little,
    so until the deadline a client's error (e.g. UNKNOWN_TOPIC_OR_PARTITION for a topic the
    controller has but the fleet has not replayed yet) counts as "not yet", not as a failure."""
    import time

    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = await check()
            if value:
                return value
            last = value
        except Exception as e:  # noqa: BLE001 - any client error while the image catches up
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what} (last: {last!r})")
        await asyncio.sleep(0.1)


async def admin_round_trip(admin: Admin, view: Any, name: str, fleet_ids: range) -> None:
    """A topic created, described, grown, configured and deleted through one client, each step checked in
    the controller's log."""
    from kraftsim.metadata.image.configs import TOPIC

    await admin.create_topic(name, 3, 2)
    await view.until(lambda img: name in img.topics.by_name and len(img.topics.by_name[name].partitions) == 3, 30,
                     f"{name} in the controller's log")

    async def described() -> dict[int, int] | None:
        leaders = await admin.describe_topic(name)
        return leaders if sorted(leaders) == [0, 1, 2] and all(v in fleet_ids for v in leaders.values()) else None

    await until(described, what=f"{name} described with leaders on the fleet")
    await admin.add_partitions(name, 5)
    await view.until(lambda img: len(img.topics.by_name[name].partitions) == 5, 30, f"{name} with 5 partitions")
    await admin.alter_config(name, "retention.ms", "123456")
    await view.until(lambda img: img.configs.get(TOPIC, name).get("retention.ms") == "123456", 30,
                     "retention.ms in the controller's log")

    async def config() -> bool:
        return await admin.describe_config(name, "retention.ms") == "123456"

    await until(config, what="retention.ms described through the listener")
    await admin.delete_topic(name)
    await view.until(lambda img: name not in img.topics.by_name, 30, f"{name} deleted in the controller's log")
