"""``kraftsim metadata-quorum``: Kafka 3.9's ``kafka-metadata-quorum.sh describe`` against a
controller (kraftsim's or Kafka's).

It asks DescribeQuorum (and DescribeCluster, for the cluster id ``--status`` prints) and prints
what Kafka's MetadataQuorumCommand prints, so scripts that parse one parse the other: the
``--status`` summary and the ``--replication`` table (``--human-readable`` for relative times).
Only the leader answers DescribeQuorum; pointed at another controller of the quorum, the tool
finds the leader as Kafka's admin client does, through DescribeCluster (its ControllerId and
that controller's endpoint), and asks again there, until a deadline while an election is on.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kraftsim.cli import tool_client
from kraftsim.cli.common import CommandError, Parser, UsageError
from kraftsim.rpc import uuids
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import DescribeClusterRequest, DescribeQuorumRequest

if TYPE_CHECKING:
    from kraftsim.rpc.messages import DescribeQuorumResponse

PROG = "kraftsim metadata-quorum"
METADATA_TOPIC = "__cluster_metadata"
HEADERS = ("NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status")


@dataclass(frozen=True, slots=True)
class Replica:
    node_id: int
    directory_id: uuid.UUID
    log_end_offset: int
    last_fetch_ms: int  # -1 when unknown
    last_caught_up_ms: int


@dataclass(frozen=True, slots=True)
class Quorum:
    cluster_id: str | None
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: list[Replica]
    observers: list[Replica]
    endpoints: dict[int, list[str]]  # node id -> "NAME://host:port"


def _configure(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                   help="A comma-separated list of host:port pairs to use for establishing the connection to the "
                        "Kafka cluster.")
    g.add_argument("--bootstrap-controller", metavar="HOST:PORT[,...]",
                   help="A comma-separated list of host:port pairs to use for establishing the connection to the "
                        "Kafka controllers.")
    p.add_argument("--command-config", metavar="FILE",
                   help="accepted for kafka-metadata-quorum.sh parity; kraftsim speaks PLAINTEXT only")
    sub = p.add_subparsers(dest="quorum_command", metavar="{describe}")
    sub.required = True
    d = sub.add_parser("describe", help="Describe the metadata quorum info")
    d.add_argument("--status", action="store_true",
                   help="A short summary of the quorum status and the other provides detailed information about "
                        "the status of replication.")
    d.add_argument("--replication", action="store_true", help="Detailed information about the status of replication")
    d.add_argument("--human-readable", action="store_true", help="Human-readable output")
    p.set_defaults(func=run)


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("metadata-quorum", help="describe the KRaft metadata quorum (kafka-metadata-quorum.sh)",
                              description="This tool describes kraft metadata quorum status.")
    _configure(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = Parser(prog=PROG, description="This tool describes kraft metadata quorum status.")
    _configure(p)
    try:
        args = p.parse_args(argv)
    except UsageError as e:
        print(str(e), file=sys.stderr)
        return 1
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 0
    return run(args)


def run(args: argparse.Namespace) -> int:
    try:
        text = args.bootstrap_server or args.bootstrap_controller
        if not text:
            raise UsageError(f"{PROG}: one of the arguments --bootstrap-server --bootstrap-controller is required")
        addresses = tool_client.parse_bootstrap(text, PROG)
        if args.status and args.replication:
            raise CommandError("Only one of --status or --replication should be specified with describe sub-command")
        if args.replication:
            quorum = asyncio.run(tool_client.on_any(addresses, lambda c: describe(c, False), "kraftsim-metadata-quorum"))
            for line in replication_lines(quorum, args.human_readable, int(time.time() * 1000)):
                print(line)
        elif args.status:
            if args.human_readable:
                raise CommandError("The option --human-readable is only supported along with --replication")
            quorum = asyncio.run(tool_client.on_any(addresses, lambda c: describe(c, True), "kraftsim-metadata-quorum"))
            print("\n".join(status_lines(quorum)))
        else:
            raise CommandError("One of --status or --replication must be specified with describe sub-command")
        return 0
    except CommandError as e:
        print(str(e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


async def describe(client: KafkaClient, with_cluster_id: bool) -> Quorum:
    """DescribeQuorum of the quorum's leader: asked of ``client``'s controller, or of the leader
    it names when it is not the leader (an election under way: asked again until a deadline)."""
    deadline = time.monotonic() + tool_client.REQUEST_TIMEOUT_S
    await client.negotiate()
    while True:
        quorum = await _describe_quorum(client, with_cluster_id)
        if quorum is not None:
            return quorum
        leader = await _leader_address(client)
        if leader is not None:
            other = await KafkaClient.connect(leader[0], leader[1], client_id=client.client_id,
                                              timeout=tool_client.CONNECT_TIMEOUT_S)
            try:
                await other.negotiate()
                quorum = await _describe_quorum(other, with_cluster_id)
            finally:
                await other.close()
            if quorum is not None:
                return quorum
        if time.monotonic() > deadline:
            raise tool_client.NotController("The metadata quorum has no leader: no controller answered "
                                            "DescribeQuorum as the leader")
        await asyncio.sleep(0.1)


async def _describe_quorum(client: KafkaClient, with_cluster_id: bool) -> Quorum | None:
    """The quorum as ``client``'s controller describes it, or None when it is not the leader."""
    req = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name=METADATA_TOPIC, partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])
    resp = await client.request(req, timeout=tool_client.REQUEST_TIMEOUT_S)
    _check(resp.error_code, resp.error_message)
    p = resp.topics[0].partitions[0]
    if p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
        return None
    _check(p.error_code, p.error_message)
    endpoints = {n.node_id: [f"{x.name}://{_host(x.host)}:{x.port}" for x in n.listeners] for n in resp.nodes}
    cluster_id = None
    if with_cluster_id:
        cluster = await client.request(DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                              endpoint_type=2), timeout=tool_client.REQUEST_TIMEOUT_S)
        _check(cluster.error_code, cluster.error_message)
        cluster_id = cluster.cluster_id
    return Quorum(cluster_id, p.leader_id, p.leader_epoch, p.high_watermark, [_replica(r) for r in p.current_voters],
                  [_replica(r) for r in p.observers], endpoints)


async def _leader_address(client: KafkaClient) -> tuple[str, int] | None:
    """The active controller's address as ``client``'s controller knows it (DescribeCluster's
    ControllerId among its controllers), None when it knows none."""
    resp = await client.request(DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=2),
                                timeout=tool_client.REQUEST_TIMEOUT_S)
    if resp.error_code != ErrorCode.NONE or resp.controller_id < 0:
        return None
    node = next((b for b in resp.brokers if b.broker_id == resp.controller_id), None)
    return None if node is None else (node.host, node.port)


def _check(code: int, message: str | None) -> None:
    if code == ErrorCode.NOT_CONTROLLER:
        raise tool_client.NotController(message or "This is not the correct controller for this cluster.")
    if code != ErrorCode.NONE:
        name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
        raise CommandError(message or f"The server answered {name}")


def _replica(r: DescribeQuorumResponse.ReplicaState) -> Replica:
    return Replica(r.replica_id, r.replica_directory_id, r.log_end_offset, r.last_fetch_timestamp,
                   r.last_caught_up_timestamp)


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _leader(q: Quorum) -> Replica:
    leader = next((v for v in q.voters if v.node_id == q.leader_id), None)
    if leader is None:
        raise CommandError(f"The leader {q.leader_id} is not among the voters")
    return leader


def status_lines(q: Quorum) -> list[str]:
    leader = _leader(q)
    laggard = min(q.voters, key=lambda v: v.log_end_offset)
    lag = leader.log_end_offset - laggard.log_end_offset
    if laggard is leader:
        lag_ms = 0
    elif leader.last_caught_up_ms >= 0 and laggard.last_caught_up_ms >= 0:
        lag_ms = leader.last_caught_up_ms - laggard.last_caught_up_ms
    else:
        lag_ms = -1
    return [
        f"ClusterId:              {q.cluster_id}",
        f"LeaderId:               {q.leader_id}",
        f"LeaderEpoch:            {q.leader_epoch}",
        f"HighWatermark:          {q.high_watermark}",
        f"MaxFollowerLag:         {lag}",
        f"MaxFollowerLagTimeMs:   {lag_ms}",
        f"CurrentVoters:          {_nodes(q, q.voters)}",
        f"CurrentObservers:       {_nodes(q, q.observers)}",
    ]


def _nodes(q: Quorum, replicas: list[Replica]) -> str:
    out = []
    for r in replicas:
        directory = "null" if not r.directory_id.int else f'"{uuids.to_str(r.directory_id)}"'
        text = f'{{"id": {r.node_id}, "directoryId": {directory}'
        eps = q.endpoints.get(r.node_id)
        if eps:
            text += ", \"endpoints\": [" + ", ".join(f'"{e}"' for e in eps) + "]"
        out.append(text + "}")
    return "[" + ", ".join(out) + "]"


def replication_lines(q: Quorum, human: bool, now_ms: int) -> list[str]:
    leader = _leader(q)
    rows: list[list[str]] = []

    def when(ms: int) -> str:
        if ms < 0:
            return "-1"
        return f"{now_ms - ms} ms ago" if human else str(ms)

    groups = [("Leader", [leader]), ("Follower", [v for v in q.voters if v.node_id != q.leader_id]),
              ("Observer", q.observers)]
    for status, replicas in groups:
        for r in replicas:
            rows.append([str(r.node_id), uuids.to_str(r.directory_id), str(r.log_end_offset),
                         str(leader.log_end_offset - r.log_end_offset), when(r.last_fetch_ms),
                         when(r.last_caught_up_ms), status])
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(HEADERS)]
    return ["".join(cell.ljust(w) + "\t" for cell, w in zip(row, widths, strict=True))
            for row in [list(HEADERS), *rows]]
