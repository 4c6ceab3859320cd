"""Dynamic configs by resource (ConfigRecord); topic configs are dropped with their topic.

Keys are (resource type id, resource name) as in ConfigResource: 2 TOPIC, 4 BROKER (name "" is
the cluster default), 8 BROKER_LOGGER, 16 CLIENT_METRICS, 32 GROUP. A null value deletes the key
and a resource whose map becomes empty disappears, so "no configs" has one representation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from metadata.records import by_name
from rpc.message import Message

ConfigRecord: Any = by_name("ConfigRecord")

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
CLIENT_METRICS = 16
GROUP = 32

Resource = tuple[int, str]


class ConfigsImage:
    __slots__ = ("resources",)

    def __init__(self) -> None:
        self.resources: dict[Resource, dict[str, str]] = {}

    def get(self, resource_type: int, resource_name: str) -> dict[str, str]:
        """The resource's configs (empty dict when none); do not mutate the result."""
        return self.resources.get((resource_type, resource_name), {})

    def topic_configs(self, topic_name: str) -> dict[str, str]:
        return self.get(TOPIC, topic_name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConfigsImage):
            return NotImplemented
        return self.resources == other.resources

    def __repr__(self) -> str:
        return f"ConfigsImage({self.resources})"

    def records(self) -> Iterator[tuple[Message, int]]:
        for (rtype, rname) in sorted(self.resources):
            data = self.resources[(rtype, rname)]
            for key in sorted(data):
                yield ConfigRecord(resource_type=rtype, resource_name=rname, name=key, value=data[key]), 0


def replay_config(configs: ConfigsImage, record: Any) -> None:
    resource = (record.resource_type, record.resource_name)
    data = configs.resources.get(resource)
    if record.value is None:
        if data is not None:
            data.pop(record.name, None)
            if not data:
                del configs.resources[resource]
    elif data is None:
        configs.resources[resource] = {record.name: record.value}
    else:
        data[record.name] = record.value


def delete_topic_configs(configs: ConfigsImage, topic_name: str) -> None:
    configs.resources.pop((TOPIC, topic_name), None)
