"""Kafka's command-line tools beside kraftsim's: ``kafka-features --bootstrap-controller``
(FeatureCommand) describe/upgrade/downgrade against both controllers. The admin tools against
real brokers on each controller are in test_admin_tools.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from kraftsim.rpc.client import KafkaClient
from tests.kafka import differential as d
from tests.kafka import normalise as norm
from tests.kafka.conftest import PairNodes
from tests.kafka.harness import (
    Node,
    ToolResult,
    kafka_features,
    kraftsim_cli,
)

pytestmark = pytest.mark.kafka

FEATURE_COMMANDS: list[list[str]] = [
    ["describe"],
    ["upgrade", "--metadata", "3.9"],
    ["downgrade", "--metadata", "3.8", "--dry-run"],
    ["downgrade", "--metadata", "3.8"],
    ["describe"],
    ["upgrade", "--feature", "metadata.version=22"],
    ["downgrade", "--feature", "metadata.version=16"],
    ["downgrade", "--metadata", "3.7-IV4", "--unsafe"],
    ["upgrade", "--metadata", "3.9-IV0"],
    ["disable", "--feature", "acme.feature"],
    ["upgrade", "--feature", "acme.feature=1"],
    ["describe"],
]

Tool = Callable[..., ToolResult]


def kafka_tool(*args: str) -> ToolResult:
    return kafka_features(*args)


def kraftsim_tool(*args: str) -> ToolResult:
    return kraftsim_cli("features", *args)


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr_last: str
    records: list[Any]


async def settle(node: Node) -> None:
    """normalise.PUBLICATION_LAG: let the node's ApiVersions catch up before describing."""
    host, port = node.bootstrap.rsplit(":", 1)
    client = await KafkaClient.connect(host, int(port))
    try:
        await d.request(d.Side(node, client), d.AV(client_software_name="t", client_software_version="1"), 4)
    finally:
        await client.close()


class Runner:
    """One tool against one node, one command at a time, with the records each command wrote."""

    def __init__(self, tool: Tool, node: Node) -> None:
        self.tool, self.node = tool, node
        self.cursor = d.log_end(node.metadata_dir)

    def run(self, cmd: list[str]) -> Outcome:
        asyncio.run(settle(self.node))
        r = self.tool("--bootstrap-controller", self.node.bootstrap, *cmd)
        recs = d.read_log(self.node.metadata_dir, self.cursor)
        self.cursor = recs[-1].offset + 1 if recs else self.cursor
        err = norm.tool_lines(r.stderr)
        return Outcome(r.returncode, norm.mask_feature_epoch("\n".join(norm.tool_lines(r.stdout))),
                       err[-1] if err else "",
                       [(x["type"], x["fields"]) for x in d.records_view(recs, norm.SideView(0))])


def compare(kafka_side: Runner, other: Runner) -> list[Outcome]:
    """Each command on both, compared as it goes (the first difference ends the test)."""
    theirs = []
    for cmd in FEATURE_COMMANDS:
        x, y = kafka_side.run(cmd), other.run(cmd)
        assert x == y, f"kafka-features {' '.join(cmd)}:\nKafka:    {x}\nkraftsim: {y}"
        theirs.append(x)
    return theirs


def test_kraftsim_features_tool_matches_kafka_features(pair_factory: Callable[..., PairNodes]) -> None:
    """``kraftsim features`` against kraftsim prints and does what ``kafka-features`` does
    against a real controller, command for command (output, exit status, records)."""
    nodes = pair_factory("features-tools")
    theirs = compare(Runner(kafka_tool, nodes.kafka), Runner(kraftsim_tool, nodes.kraftsim))
    assert theirs[0].returncode == 0 and "metadata.version" in theirs[0].stdout
    assert theirs[3].records == [("FeatureLevelRecord", {"name": "metadata.version", "feature_level": 20})]
    assert theirs[5].returncode == 1


def test_kafka_features_tool_against_kraftsim(pair_factory: Callable[..., PairNodes]) -> None:
    nodes = pair_factory("features-kafka-tool")
    compare(Runner(kafka_tool, nodes.kafka), Runner(kafka_tool, nodes.kraftsim))
