"""Kafka 4.4's own tools pointed at a real Kafka 4.4.0 controller and at kraftsim speaking 4.4
(the shared 4.4 pair), their output compared line for line: kafka-metadata-quorum describe,
kafka-features describe and kafka-configs --bootstrap-controller.
What is masked is what differs between any two controllers: ports, directory ids, offsets,
times. The same tools against a 4.4 cluster with brokers, and reading kraftsim's files, are in
test_real_brokers_4x.py; 4.4's kafka-topics, kafka-configs, kafka-acls, kafka-leader-election and
kafka-reassign-partitions through a real 4.4 broker, on each controller side by side, are in
test_admin_tools.py."""

from __future__ import annotations

import re

import pytest

from tests.kafka import differential as d
from tests.kafka import normalise as norm
from tests.kafka.harness import Node, run_tool, tool_class
from tests.kafka.provision import RELEASES

pytestmark = pytest.mark.kafka

VERSION = RELEASES["4.4"]

COMMANDS: list[tuple[str, tuple[str, ...]]] = [
    ("MetadataQuorumCommand", ("describe", "--status")),
    ("MetadataQuorumCommand", ("describe", "--replication")),
    ("FeatureCommand", ("describe",)),
    ("ConfigCommand", ("--describe", "--entity-type", "brokers", "--entity-default")),
]

# Lines of describe --status and --replication whose values are each node's own.
_VOLATILE = [
    (re.compile(r"(HighWatermark|MaxFollowerLag|MaxFollowerLagTimeMs):(\s+)-?\d+"), r"\1:\2N"),
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:PORT"),
    (re.compile(r'"directoryId": "[^"]+"'), '"directoryId": "DIR"'),
    (re.compile(r"\b[A-Za-z0-9_-]{22}\b"), "UUID"),  # a base64 directory id in the replication table
]


def masked(text: str) -> list[str]:
    lines = norm.mask_feature_epoch("\n".join(norm.tool_lines(text))).splitlines()
    out = []
    for line in lines:
        for pattern, repl in _VOLATILE:
            line = pattern.sub(repl, line)
        out.append(line)
    return out


def replication_rows(lines: list[str]) -> list[tuple[str, str]]:
    """describe --replication: (node id, status) per row; the offsets, lags and times between
    are each node's own."""
    return [(r[0], r[-1]) for r in (line.split() for line in lines[1:]) if r]


def run(node: Node, tool: str, args: tuple[str, ...]) -> tuple[int, list[str]]:
    r = run_tool(tool_class(tool, VERSION), "--bootstrap-controller", node.bootstrap, *args, version=VERSION)
    return r.returncode, masked(r.stdout) + [f"stderr: {line}" for line in norm.tool_lines(r.stderr)[-1:]]


async def test_kafka_44_tools_print_the_same_against_both_controllers(shared_pair_44: d.Pair) -> None:
    kafka, ours = (side.node for side in shared_pair_44.sides)
    for tool, args in COMMANDS:
        theirs, mine = run(kafka, tool, args), run(ours, tool, args)
        assert theirs[0] == 0, (tool, args, theirs)
        if args[:2] == ("describe", "--replication"):
            assert replication_rows(theirs[1]) == replication_rows(mine[1]), (tool, args, theirs, mine)
            assert theirs[1][0].split() == mine[1][0].split()  # the header
        else:
            assert theirs == mine, f"{tool} {' '.join(args)}:\nKafka:    {theirs}\nkraftsim: {mine}"
