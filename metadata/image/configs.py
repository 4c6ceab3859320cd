"""Dynamic configs by resource (ConfigRecord); topic configs are dropped with their topic.

Keys are (resource type id, resource name) as in ConfigResource: 2 TOPIC, 4 BROKER (name "" is
the cluster default), 8 BROKER_LOGGER, 16 CLIENT_METRICS, 32 GROUP. A null value deletes the key
and a resource whose map becomes empty disappears, so "no configs" has one representation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kraftsim.metadata.image.journal import get_nested, swap_nested
from kraftsim.metadata.messages import ConfigRecord
from kraftsim.rpc.message import Message

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

    # --- the only mutators (see journal.py): install a value, return the one replaced ------

    def get_config(self, key: tuple[Resource, str]) -> str | None:
        return get_nested(self.resources, key)

    def swap_config(self, key: tuple[Resource, str], value: str | None) -> str | None:
        return swap_nested(self.resources, key, value)


def replay_config(configs: ConfigsImage, record: Any, undo: list | None) -> None:
    key = ((record.resource_type, record.resource_name), record.name)
    old = configs.swap_config(key, record.value)
    if undo is not None:
        undo.append((configs.swap_config, key, old))


def delete_topic_configs(configs: ConfigsImage, topic_name: str, undo: list | None) -> None:
    """One swap per key, so a delta sees each removed config like any other change."""
    resource = (TOPIC, topic_name)
    for name in list(configs.resources.get(resource, ())):
        key = (resource, name)
        old = configs.swap_config(key, None)
        if undo is not None:
            undo.append((configs.swap_config, key, old))
