"""``kraftsim metadata-quorum``: Kafka 3.9's ``kafka-metadata-quorum.sh describe``,
``add-controller`` and ``remove-controller`` against a controller (kraftsim's or Kafka's).

It asks DescribeQuorum (and DescribeCluster, for the cluster id ``--status`` prints) and prints
what Kafka's MetadataQuorumCommand prints, so scripts that parse one parse the other: the
``--status`` summary and the ``--replication`` table (``--human-readable`` for relative times).
Only the leader answers DescribeQuorum; pointed at another controller of the quorum, the tool
finds the leader as Kafka's admin client does, through DescribeCluster (its ControllerId and
that controller's endpoint), and asks again there, until a deadline while an election is on.

``add-controller`` reads the new controller's own configuration (``--command-config``: its
``node.id``, ``process.roles``, metadata log directory and its ``meta.properties`` directory id,
and its controller listeners) and sends AddRaftVoter to the active controller, as Kafka's admin
client does; ``remove-controller`` sends RemoveRaftVoter for ``--controller-id`` and
``--controller-directory-id``. Both wait for the change to be committed and print Kafka's line;
a refusal prints the exception Kafka's tool prints first (its stack trace left out).
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
from kraftsim.rpc.messages import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
    DescribeClusterRequest,
    DescribeQuorumRequest,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
)

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
    sub = p.add_subparsers(dest="quorum_command", metavar="{describe,add-controller,remove-controller}")
    sub.required = True
    d = sub.add_parser("describe", help="Describe the metadata quorum info")
    d.add_argument("--status", action="store_true",
                   help="A short summary of the quorum status and the other provides detailed information about "
                        "the status of replication.")
    d.add_argument("--replication", action="store_true", help="Detailed information about the status of replication")
    d.add_argument("--human-readable", action="store_true", help="Human-readable output")
    a = sub.add_parser("add-controller", help="Add a controller to the KRaft controller cluster")
    a.add_argument("--dry-run", action="store_true", help="True if we should print what would be done, but not do it.")
    r = sub.add_parser("remove-controller", help="Remove a controller from the KRaft controller cluster")
    r.add_argument("--controller-id", "-i", type=int, required=True, help="The id of the controller to remove.")
    r.add_argument("--controller-directory-id", "-d", required=True,
                   help="The directory ID of the controller to remove.")
    r.add_argument("--dry-run", action="store_true", help="True if we should print what would be done, but not do it.")
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
        if args.quorum_command == "add-controller":
            print(add_controller(addresses, args.command_config, args.dry_run))
            return 0
        if args.quorum_command == "remove-controller":
            print(remove_controller(addresses, args.controller_id, args.controller_directory_id, args.dry_run))
            return 0
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


# -- add-controller and remove-controller -----------------------------------------------------------

# The exception Kafka's admin client completes a refused change with, by error code (the tool
# prints its ExecutionException's message: the class name, then the leader's message).
_EXCEPTIONS: dict[int, str] = {
    ErrorCode.DUPLICATE_VOTER: "DuplicateVoterException", ErrorCode.VOTER_NOT_FOUND: "VoterNotFoundException",
    ErrorCode.REQUEST_TIMED_OUT: "TimeoutException", ErrorCode.UNSUPPORTED_VERSION: "UnsupportedVersionException",
    ErrorCode.INVALID_REQUEST: "InvalidRequestException",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "ClusterAuthorizationException",
    ErrorCode.INCONSISTENT_CLUSTER_ID: "InconsistentClusterIdException",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "NotLeaderOrFollowerException",
}


def controller_config(path: str | None) -> tuple[int, uuid.UUID, list[tuple[str, str, int]]]:
    """node.id, directory id and controller endpoints from the new controller's configuration,
    with the refusals of Kafka's MetadataQuorumCommand."""
    from pathlib import Path

    from kraftsim.metadata.files import MetaProperties, parse_java_properties

    if path is None:
        raise CommandError("You must supply the configuration file of the controller you are adding when using "
                           "add-controller.")
    try:
        props = parse_java_properties(Path(path).read_text("latin-1"))
    except OSError:
        raise CommandError(f"Properties file {path} does not exists!") from None
    if "node.id" not in props:
        raise CommandError("node.id not found in configuration file. Is this a valid controller configuration file?")
    try:
        node_id = int(props["node.id"].strip())
    except ValueError:
        raise CommandError(f'For input string: "{props["node.id"]}"') from None
    if node_id < 0:
        raise CommandError("node.id was negative in configuration file. Is this a valid controller configuration "
                           "file?")
    if "controller" not in props.get("process.roles", ""):
        raise CommandError("process.roles did not contain 'controller' in configuration file. Is this a valid "
                           "controller configuration file?")
    directory = props.get("metadata.log.dir") or (props.get("log.dirs", "").strip().split(",")[0]
                                                  if "log.dirs" in props else None)
    if directory is None:
        raise CommandError("Neither metadata.log.dir nor log.dirs were found. Is this a valid controller "
                           "configuration file?")
    try:
        meta = MetaProperties.read(Path(directory) / "meta.properties")
    except Exception:  # noqa: BLE001 - any unreadable meta.properties is Kafka's one refusal
        raise CommandError(f"Unable to read meta.properties from {directory}") from None
    if not meta.directory_id:
        raise CommandError(f"No directory id found in {directory}")
    directory_id = uuids.from_str(meta.directory_id)
    listeners: dict[str, tuple[str, int]] = {}
    for key in ("listeners", "advertised.listeners"):
        for item in filter(None, (x.strip() for x in props.get(key, "").split(","))):
            name, _, rest = item.partition("://")
            host, _, port = rest.rpartition(":")
            listeners[name.upper()] = (host.strip("[]") or "localhost", int(port))
    if "controller.listener.names" not in props:
        raise CommandError("controller.listener.names was not found. Is this a valid controller configuration file?")
    endpoints = []
    for name in props["controller.listener.names"].split(","):
        name = name.strip().upper()
        if name not in listeners:
            raise CommandError(f"Cannot find information about controller listener name: {name}")
        endpoints.append((name, *listeners[name]))
    return node_id, directory_id, endpoints


def add_controller(addresses: list[tuple[str, int]], config: str | None, dry_run: bool) -> str:
    node_id, directory_id, endpoints = controller_config(config)
    if not dry_run:
        request = AddRaftVoterRequest(cluster_id=None, timeout_ms=int(tool_client.REQUEST_TIMEOUT_S * 1000),
                                      voter_id=node_id, voter_directory_id=directory_id,
                                      listeners=[AddRaftVoterRequest.Listener(name=n, host=h, port=p)
                                                 for n, h, p in endpoints])
        asyncio.run(tool_client.on_any(addresses, lambda c: _change(c, request), "kraftsim-metadata-quorum"))
    shown = ", ".join(f"{n}://[{h}]:{p}" if ":" in h else f"{n}://{h}:{p}" for n, h, p in endpoints)
    verb = "DRY RUN of adding" if dry_run else "Added"
    return f"{verb} controller {node_id} with directory id {uuids.to_str(directory_id)} and endpoints: {shown}"


def remove_controller(addresses: list[tuple[str, int]], controller_id: int, directory: str, dry_run: bool) -> str:
    if controller_id < 0:
        raise CommandError(f"Invalid negative --controller-id: {controller_id}")
    try:
        directory_id = uuids.from_str(directory)
    except ValueError as e:
        raise CommandError(f"Failed to parse --controller-directory-id: {e}") from None
    if not dry_run:
        request = RemoveRaftVoterRequest(cluster_id=None, voter_id=controller_id, voter_directory_id=directory_id)
        asyncio.run(tool_client.on_any(addresses, lambda c: _change(c, request), "kraftsim-metadata-quorum"))
    verb = "DRY RUN of removing " if dry_run else "Removed "
    return f"{verb} KRaft controller {controller_id} with directory id {uuids.to_str(directory_id)}"


async def _change(client: KafkaClient, request: AddRaftVoterRequest | RemoveRaftVoterRequest) -> None:
    """Send the change to the active controller (found through DescribeCluster, as Kafka's admin
    client finds it) and wait for its answer: given once the change is committed."""
    await client.negotiate()
    target, other = client, None
    leader = await _leader_address(client)
    try:
        if leader is not None:
            other = target = await KafkaClient.connect(leader[0], leader[1], client_id=client.client_id,
                                                       timeout=tool_client.CONNECT_TIMEOUT_S)
            await other.negotiate()
        response = await target.request(request, 0, timeout=tool_client.REQUEST_TIMEOUT_S + 5)
    finally:
        if other is not None:
            await other.close()
    assert isinstance(response, (AddRaftVoterResponse, RemoveRaftVoterResponse))
    code = response.error_code
    if code == ErrorCode.NONE:
        return
    if code == ErrorCode.NOT_CONTROLLER:
        raise tool_client.NotController(response.error_message or "This is not the correct controller for this "
                                                                  "cluster.")
    name = _EXCEPTIONS.get(code, "ApiException")
    raise CommandError(f"org.apache.kafka.common.errors.{name}: {response.error_message or ''}".rstrip(": "))


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
