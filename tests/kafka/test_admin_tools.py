"""Kafka's own admin tools, run the same way against two one-broker clusters, one whose controller
is a real Kafka 3.9 controller and one whose controller is kraftsim, and their outputs compared.

Each broker is a real Kafka 3.9 broker with a PLAINTEXT listener (User:ANONYMOUS, a super user)
and a SASL_PLAINTEXT one (PLAIN users from the broker's JAAS config, SCRAM users from the metadata
log). Both controllers and both brokers run the StandardAuthorizer with
``allow.everyone.if.no.acl.found=false``, so the SASL users are judged by ACLs: a request a broker
forwards in an Envelope is authorized by the controller as the client's principal.

The script covers ``kafka-topics`` (create, describe, alter, delete), ``kafka-configs`` (topics,
a broker, the broker default, SCRAM users, client quotas), ``kafka-acls`` (add, list, remove, with
prefixed patterns), ``kafka-leader-election`` (preferred, unclean) and ``kafka-reassign-partitions``
(generate, execute, verify); then authorization end to end: alice is refused, ``kafka-acls --add``
grants, and the same request succeeds; carol authenticates on the broker with the SCRAM-SHA-256
credential that kraftsim wrote. Outputs differ only where the clusters must (topic ids, ports).

The first script (topics, configs, ACLs, elections, reassignments) also runs with Kafka 4.4.0:
its tools, through a real 4.4.0 broker, on a real 4.4.0 controller and on kraftsim with
``kraftsim.release=4.4``, all formatted at 4.4 (4.4-IV2, ELR on). That pair is this module's own,
started only for that test (marked ``story``); the SASL, token and Python-client tests stay on
3.9. Which class each tool is in a release is ``harness.MOVED``'s to say."""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import fleet_clients
from tests.harness import free_port
from tests.kafka import normalise as norm
from tests.kafka.conftest import PAIR_CONFIG
from tests.kafka.harness import (
    KafkaNode,
    KraftsimNode,
    Node,
    ToolResult,
    kafka_acls,
    kafka_configs,
    kafka_delegation_tokens,
    kafka_leader_election,
    kafka_reassign_partitions,
    kafka_topics,
    random_cluster_id,
)
from tests.kafka.provision import DEFAULT_RELEASE, KAFKA_VERSION, RELEASES, release_of

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
    "allow.everyone.if.no.acl.found": "false",
    # Delegation tokens: the controller signs them, the broker checks a token's HMAC with it.
    "delegation.token.secret.key": "admin-tools-secret",
}
PLAIN_USERS = 'user_alice="alice-secret" user_bob="bob-secret" user_eve="eve-secret"'
JAAS = {
    "plain": f"org.apache.kafka.common.security.plain.PlainLoginModule required {PLAIN_USERS};",
    "scram": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
}


def broker_config(sasl_port: int, plain_port: int) -> dict[str, str]:
    listeners = f"PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    return {
        **AUTHORIZER,
        "listeners": listeners,
        "advertised.listeners": listeners,
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS["plain"],
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": JAAS["scram"],
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": JAAS["scram"],
        "offsets.topic.replication.factor": "1",
    }


def client_config(directory: Path, name: str, mechanism: str, password: str) -> Path:
    module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
    path = directory / f"{name}.properties"
    path.write_text("security.protocol=SASL_PLAINTEXT\n"
                    f"sasl.mechanism={mechanism}\n"
                    f"sasl.jaas.config=org.apache.kafka.common.security.{module} required "
                    f'username="{name}" password="{password}";\n')
    return path


@dataclass
class ToolCluster:
    """A controller (Kafka's or kraftsim's) and one real broker, with client property files."""

    directory: Path
    controller: Node
    broker: KafkaNode = field(init=False)
    sasl_port: int = field(default_factory=free_port)
    #: The Kafka version of the broker and of every tool run against this cluster; the broker is
    #: formatted at its release line, as the controller is.
    kafka_version: str = KAFKA_VERSION

    def __post_init__(self) -> None:
        voters = f"{self.controller.node_id}@{self.controller.bootstrap}"
        plain_port = free_port()
        self.broker = KafkaNode(self.directory / "broker", role="broker", node_id=1, port=plain_port,
                                cluster_id=self.controller.cluster_id, voters=voters,
                                release_version=release_of(self.kafka_version), kafka_version=self.kafka_version,
                                overrides=broker_config(self.sasl_port, plain_port))
        self.alice = client_config(self.directory, "alice", "PLAIN", "alice-secret")
        self.carol = client_config(self.directory, "carol", "SCRAM-SHA-256", "carol-secret")
        self.eve = client_config(self.directory, "eve", "PLAIN", "eve-secret")
        self.plaintext = self.directory / "plaintext.properties"
        self.plaintext.write_text("security.protocol=PLAINTEXT\n")
        self.token: tuple[str, str] | None = None  # (token id, HMAC) alice created
        self.token_user = self.alice  # the property file that authenticates with that token

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def start(self) -> ToolCluster:
        self.controller.format()
        self.broker.format()
        self.controller.start()
        self.broker.start(wait=False)
        return self

    def stop(self) -> None:
        self.broker.kill()
        self.controller.stop()


def tool_clusters(root: Path, release: str) -> Iterator[tuple[ToolCluster, ToolCluster]]:
    """The pair of one-broker clusters of a Kafka release, both formatted at it and started: a real
    controller of it, and kraftsim speaking it (``kraftsim.release``); each broker of that release."""
    version = RELEASES[release]
    config = {**PAIR_CONFIG, **AUTHORIZER}
    kafka_dir, kraftsim_dir = root / "kafka", root / "kraftsim"
    kafka = ToolCluster(kafka_dir, KafkaNode(kafka_dir / "controller", cluster_id=random_cluster_id(),
                                              release_version=release, kafka_version=version,
                                              overrides=dict(config)), kafka_version=version)
    ours_config = {**config, **({"kraftsim.release": release} if release != DEFAULT_RELEASE else {})}
    ours = ToolCluster(kraftsim_dir, KraftsimNode(kraftsim_dir / "controller", cluster_id=random_cluster_id(),
                                                  release_version=release, overrides=ours_config),
                       kafka_version=version)
    try:
        for c in (kafka, ours):
            c.start()
        for c in (kafka, ours):
            c.broker.wait_ready(120)
        yield kafka, ours
    finally:
        for c in (kafka, ours):
            c.stop()


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ToolCluster, ToolCluster]]:
    yield from tool_clusters(tmp_path_factory.mktemp("admin-tools"), DEFAULT_RELEASE)


@pytest.fixture(scope="module")
def clusters_44(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ToolCluster, ToolCluster]]:
    """Kafka 4.4.0's pair, started only when the 4.4 script runs."""
    yield from tool_clusters(tmp_path_factory.mktemp("admin-tools-44"), "4.4")


# -- the script ------------------------------------------------------------------------------

TRANSCRIPT = os.environ.get("KRAFTSIM_TOOLS_TRANSCRIPT")  # a file to append every step's output to
Step = Callable[[ToolCluster], ToolResult]


def on(tool: Callable[..., ToolResult], *args: str, sasl: str | None = None) -> Step:
    """A tool step against a cluster's broker: PLAINTEXT (a super user), or SASL as a user; the
    tool is the cluster's Kafka version's."""
    def run(c: ToolCluster) -> ToolResult:
        if sasl is None:
            return tool("--bootstrap-server", c.bootstrap, *args, version=c.kafka_version)
        return tool("--bootstrap-server", c.sasl_bootstrap, "--command-config", str(getattr(c, sasl)), *args,
                    version=c.kafka_version)
    return run


def normalised(c: ToolCluster, r: ToolResult) -> str:
    text = f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    if c.token is not None:  # random on each side
        text = text.replace(c.token[0], "<token id>").replace(c.token[1], "<hmac>")
    text = text.replace(c.sasl_bootstrap, "<sasl>").replace(c.bootstrap, "<broker>")
    text = text.replace(str(c.directory), "<dir>")
    text = re.sub(r"(TopicId: )\S+", r"\1<id>", text)
    text = re.sub(r"^\[\d{4}-\d\d-\d\d [\d:,]+\]", "[<time>]", text, flags=re.M)
    # Kafka prints its JVM request object in refusals.
    # A broker lists a user's SCRAM mechanisms in its JVM's hash order (an enum's identity hash):
    # the order changes from run to run on Kafka's own cluster, so the items are sorted.
    text = re.sub(r"^(SCRAM credential configs for .* are )(.*)$",
                  lambda m: m.group(1) + ", ".join(sorted(m.group(2).split(", "))), text, flags=re.M)
    # kafka-acls prints a resource's entries from a set, in its own JVM's hash order: the order
    # changes from JVM to JVM (the tools share warm JVMs, tests/kafka/tool_server.py), so each
    # run of entries is sorted, each line keeping its place's decoration.
    text = re.sub(r"(?:^ ?\t\(principal=.*\) ?$\n?)+", _sorted_acl_entries, text, flags=re.M)
    assert norm.REQUEST_TEXT in norm.ALL
    text = re.sub(r"Request Request\(.*\) is not authorized\.", "Request <request> is not authorized.", text)
    # Stack frames say where the tool's thread was when the answer came (a future already done or
    # not yet), and a JVM's warnings about its own flags are not the tool's output.
    return "\n".join(line for line in text.splitlines()
                     if not line.startswith(("OpenJDK", "WARNING: ", "\tat ", "\t... ")))


def _sorted_acl_entries(m: re.Match[str]) -> str:
    lines = m.group(0).split("\n")
    tail = lines.pop() if lines[-1] == "" else None
    parts = [re.fullmatch(r"( ?\t)(\(principal=.*\))( ?)", line) for line in lines]
    entries = sorted(p.group(2) for p in parts if p is not None)
    assert len(entries) == len(lines), lines
    out = [f"{p.group(1)}{e}{p.group(3)}" for p, e in zip(parts, entries, strict=True) if p is not None]
    return "\n".join(out + ([tail] if tail is not None else []))


def play(clusters: tuple[ToolCluster, ToolCluster], steps: list[tuple[str, Step]]) -> dict[str, str]:
    """Runs each step on both clusters (the two side by side), and asserts equal outputs; returns
    kraftsim's outputs by step name for the checks that also ask what happened."""
    kafka, ours = clusters
    outputs: dict[str, str] = {}
    with ThreadPoolExecutor(2) as pool:
        for name, step in steps:
            theirs_f, ours_f = pool.submit(step, kafka), pool.submit(step, ours)
            theirs, mine = normalised(kafka, theirs_f.result()), normalised(ours, ours_f.result())
            assert mine == theirs, f"{name}: kraftsim's cluster printed\n{mine}\n--- Kafka's printed\n{theirs}"
            outputs[name] = mine
            if TRANSCRIPT:
                with open(TRANSCRIPT, "a") as f:
                    f.write(f"== {name}\n{mine}\n")
    return outputs


def until_equal(clusters: tuple[ToolCluster, ToolCluster], name: str, step: Step, want: Callable[[str], bool],
                timeout: float = 30) -> str:
    """A describe through a broker shows what its metadata image has replayed: run it on both
    clusters side by side until ``want`` holds on each (a broker catches up within a heartbeat),
    then compare the outputs that satisfied it."""
    deadline = time.monotonic() + timeout

    def settled(c: ToolCluster) -> str:
        while not want(last := normalised(c, step(c))):
            assert time.monotonic() < deadline, f"{name}: not seen on {c.controller.kind}'s cluster:\n{last}"
            time.sleep(0.2)
        return last

    kafka, ours = clusters
    with ThreadPoolExecutor(2) as pool:
        theirs_f, ours_f = pool.submit(settled, kafka), pool.submit(settled, ours)
        theirs, mine = theirs_f.result(), ours_f.result()
    assert mine == theirs, f"{name}: kraftsim's cluster printed\n{mine}\n--- Kafka's printed\n{theirs}"
    if TRANSCRIPT:
        with open(TRANSCRIPT, "a") as f:
            f.write(f"== {name}\n{mine}\n")
    return mine


def test_topics_configs_acls_elections_and_reassignments(clusters: tuple[ToolCluster, ToolCluster],
                                                         tmp_path: Path) -> None:
    topics_configs_acls_elections_and_reassignments(clusters, tmp_path)


@pytest.mark.story
def test_topics_configs_acls_elections_and_reassignments_44(clusters_44: tuple[ToolCluster, ToolCluster],
                                                            tmp_path: Path) -> None:
    """The same script with Kafka 4.4.0's tools, through a real 4.4.0 broker on a real 4.4.0
    controller and on kraftsim speaking 4.4."""
    topics_configs_acls_elections_and_reassignments(clusters_44, tmp_path)


def topics_configs_acls_elections_and_reassignments(clusters: tuple[ToolCluster, ToolCluster],
                                                    tmp_path: Path) -> None:
    """kafka-topics, kafka-configs, kafka-acls, kafka-leader-election and kafka-reassign-partitions
    through each cluster's broker, step by step side by side, then what the brokers replayed."""
    topics_json = tmp_path / "topics.json"
    topics_json.write_text('{"version":1,"topics":[{"topic":"tools"}]}')
    plan = tmp_path / "plan.json"
    plan.write_text('{"version":1,"partitions":[{"topic":"tools","partition":0,"replicas":[1]}]}')
    out = play(clusters, [
        ("create", on(kafka_topics, "--create", "--topic", "tools", "--partitions", "3",
                      "--replication-factor", "1", "--config", "retention.ms=1000")),
        ("create again", on(kafka_topics, "--create", "--topic", "tools", "--partitions", "1")),
        ("alter partitions", on(kafka_topics, "--alter", "--topic", "tools", "--partitions", "4")),
        ("shrink partitions", on(kafka_topics, "--alter", "--topic", "tools", "--partitions", "2")),
        ("topic configs", on(kafka_configs, "--entity-type", "topics", "--entity-name", "tools", "--alter",
                             "--add-config", "retention.ms=1234,cleanup.policy=[compact,delete]")),
        ("bad topic config", on(kafka_configs, "--entity-type", "topics", "--entity-name", "tools", "--alter",
                                "--add-config", "min.insync.replicas=0")),
        ("delete topic config", on(kafka_configs, "--entity-type", "topics", "--entity-name", "tools",
                                   "--alter", "--delete-config", "cleanup.policy")),
        ("broker config", on(kafka_configs, "--entity-type", "brokers", "--entity-name", "1", "--alter",
                             "--add-config", "log.cleaner.threads=2")),
        ("broker default", on(kafka_configs, "--entity-type", "brokers", "--entity-default", "--alter",
                              "--add-config", "message.max.bytes=2000000")),
        # Both mechanisms in one command make two alterations of one user in one request: refused.
        ("scram both at once", on(kafka_configs, "--entity-type", "users", "--entity-name", "carol", "--alter",
                                  "--add-config", "SCRAM-SHA-256=[iterations=8192,password=carol-secret],"
                                                  "SCRAM-SHA-512=[password=carol-secret]")),
        ("scram 256", on(kafka_configs, "--entity-type", "users", "--entity-name", "carol", "--alter",
                         "--add-config", "SCRAM-SHA-256=[iterations=8192,password=carol-secret]")),
        ("scram 512", on(kafka_configs, "--entity-type", "users", "--entity-name", "carol", "--alter",
                         "--add-config", "SCRAM-SHA-512=[password=carol-secret]")),
        ("user quota", on(kafka_configs, "--entity-type", "users", "--entity-name", "alice", "--alter",
                          "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048")),
        ("client default quota", on(kafka_configs, "--entity-type", "clients", "--entity-default", "--alter",
                                    "--add-config", "request_percentage=50")),
        ("user and client quota", on(kafka_configs, "--entity-type", "users", "--entity-name", "alice",
                                     "--entity-type", "clients", "--entity-name", "app", "--alter",
                                     "--add-config", "producer_byte_rate=4096")),
        ("acl prefixed", on(kafka_acls, "--add", "--allow-principal", "User:bob", "--operation", "Read",
                            "--operation", "Describe", "--topic", "tool", "--resource-pattern-type", "prefixed")),
        ("acl deny", on(kafka_acls, "--add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.1",
                        "--operation", "Write", "--topic", "tools")),
        ("preferred election", on(kafka_leader_election, "--election-type", "preferred",
                                  "--all-topic-partitions")),
        ("unclean election", on(kafka_leader_election, "--election-type", "unclean", "--topic", "tools",
                                "--partition", "0")),
        ("election unknown topic", on(kafka_leader_election, "--election-type", "preferred", "--topic",
                                      "nope", "--partition", "0")),
        ("reassign generate", on(kafka_reassign_partitions, "--generate", "--topics-to-move-json-file",
                                 str(topics_json), "--broker-list", "1")),
        ("reassign execute", on(kafka_reassign_partitions, "--execute", "--reassignment-json-file", str(plan))),
        ("reassign verify", on(kafka_reassign_partitions, "--verify", "--reassignment-json-file", str(plan))),
    ])
    assert "Created topic tools." in out["create"]
    assert "Completed updating config for topic tools." in out["topic configs"]
    assert "InvalidConfigurationException" in out["bad topic config"], out["bad topic config"]
    assert "Successfully started partition reassignment" in out["reassign execute"]
    assert "Completed updating config for user carol." in out["scram 512"]

    # What the controller wrote, as the broker replayed it.
    until_equal(clusters, "describe topic", on(kafka_topics, "--describe", "--topic", "tools"),
                lambda s: "PartitionCount: 4" in s and "retention.ms=1234" in s and "cleanup.policy" not in s)
    until_equal(clusters, "describe topic configs",
                on(kafka_configs, "--describe", "--entity-type", "topics", "--entity-name", "tools"),
                lambda s: "retention.ms=1234" in s)
    until_equal(clusters, "describe broker", on(kafka_configs, "--describe", "--entity-type", "brokers",
                                                "--entity-name", "1"), lambda s: "log.cleaner.threads=2" in s)
    until_equal(clusters, "describe broker default", on(kafka_configs, "--describe", "--entity-type", "brokers",
                                                        "--entity-default"), lambda s: "message.max.bytes" in s)
    until_equal(clusters, "describe scram", on(kafka_configs, "--describe", "--entity-type", "users",
                                               "--entity-name", "carol"),
                lambda s: "SCRAM-SHA-256=iterations=8192" in s and "SCRAM-SHA-512" in s)
    until_equal(clusters, "describe quotas", on(kafka_configs, "--describe", "--entity-type", "users",
                                                "--entity-name", "alice"), lambda s: "consumer_byte_rate" in s)
    until_equal(clusters, "describe client default", on(kafka_configs, "--describe", "--entity-type",
                                                        "clients", "--entity-default"),
                lambda s: "request_percentage=50" in s)
    until_equal(clusters, "list acls", on(kafka_acls, "--list", "--topic", "tools"),
                lambda s: "User:bob" in s and "DENY" in s)
    play(clusters, [
        ("remove scram", on(kafka_configs, "--entity-type", "users", "--entity-name", "carol", "--alter",
                            "--delete-config", "SCRAM-SHA-512")),
        ("remove quota", on(kafka_configs, "--entity-type", "users", "--entity-name", "alice", "--alter",
                            "--delete-config", "consumer_byte_rate")),
        ("remove acl", on(kafka_acls, "--remove", "--force", "--deny-principal", "User:bob", "--deny-host",
                          "10.0.0.1", "--operation", "Write", "--topic", "tools")),
    ])
    until_equal(clusters, "scram after removal", on(kafka_configs, "--describe", "--entity-type", "users",
                                                    "--entity-name", "carol"), lambda s: "SCRAM-SHA-512" not in s)
    until_equal(clusters, "acls after removal", on(kafka_acls, "--list", "--topic", "tools"),
                lambda s: "DENY" not in s)


def test_sasl_users_are_judged_by_the_controllers_acls(clusters: tuple[ToolCluster, ToolCluster]) -> None:
    """alice (SASL/PLAIN on the broker) may not create a topic or alter the cluster's configs: the
    broker forwards her requests, and the controller refuses her principal. After
    ``kafka-acls --add`` (by a super user), the same create succeeds. carol authenticates with the
    SCRAM-SHA-256 credential written through kafka-configs, and sees only what her ACL lets her."""
    out = play(clusters, [
        ("alice create refused", on(kafka_topics, "--create", "--topic", "alice-1", "--partitions", "1",
                                    sasl="alice")),
        ("alice alter cluster refused", on(kafka_acls, "--add", "--allow-principal", "User:alice", "--operation",
                                           "All", "--cluster", sasl="alice")),
        ("grant alice", on(kafka_acls, "--add", "--allow-principal", "User:alice", "--operation", "Create",
                           "--operation", "Describe", "--topic", "alice-", "--resource-pattern-type", "prefixed")),
    ])
    assert "TopicAuthorizationException" in out["alice create refused"], out["alice create refused"]
    assert "ClusterAuthorizationException" in out["alice alter cluster refused"], out["alice alter cluster refused"]
    until_equal(clusters, "alice may create", on(kafka_topics, "--create", "--topic", "alice-1", "--partitions",
                                                 "1", sasl="alice"),
                lambda s: "Created topic alice-1." in s)
    # carol: the SCRAM credential from 'kafka-configs --add-config SCRAM-SHA-256=[...]' in the
    # first test (or made here when this test runs alone) authenticates her on the real broker.
    play(clusters, [
        ("scram user", on(kafka_configs, "--entity-type", "users", "--entity-name", "carol", "--alter",
                          "--add-config", "SCRAM-SHA-256=[iterations=8192,password=carol-secret]")),
        ("grant carol", on(kafka_acls, "--add", "--allow-principal", "User:carol", "--operation", "Describe",
                           "--topic", "alice-1")),
    ])
    until_equal(clusters, "carol lists", on(kafka_topics, "--list", sasl="carol"), lambda s: "alice-1" in s)
    kafka, ours = clusters
    log = ours.controller.log_path.read_text()
    assert "Principal = User:alice is Denied operation = CREATE" in log, log[-2000:]
    assert "Principal = User:alice is Denied operation = ALTER from host = 127.0.0.1 on resource = Cluster" in log, log[-2000:]


async def client_round_trip(client: str, bootstrap: str, name: str) -> list[object]:
    """What a user of ``client`` sees doing the admin operations through a real broker."""
    admin = fleet_clients.CLIENTS[client](bootstrap)
    seen: list[object] = []
    try:
        await admin.create_topic(name, 3, 1)
        seen.append(await fleet_clients.until(lambda: admin.describe_topic(name), what=f"{name} described"))
        await admin.add_partitions(name, 5)

        async def five() -> dict[int, int] | None:
            leaders = await admin.describe_topic(name)
            return leaders if len(leaders) == 5 else None

        seen.append(await fleet_clients.until(five, what=f"{name} with 5 partitions"))
        await admin.alter_config(name, "retention.ms", "123456")

        async def config() -> str | None:
            value = await admin.describe_config(name, "retention.ms")
            return value if value == "123456" else None

        seen.append(await fleet_clients.until(config, what="retention.ms described"))
        await admin.delete_topic(name)

        async def gone() -> bool:
            try:
                await admin.describe_topic(name)
            except Exception:  # noqa: BLE001 - each client reports an unknown topic its own way
                return True
            return False

        seen.append(await fleet_clients.until(gone, what=f"{name} gone"))
    finally:
        await admin.close()
    return seen


@pytest.mark.parametrize("client", sorted(fleet_clients.CLIENTS))
async def test_python_admin_clients_through_real_brokers(clusters: tuple[ToolCluster, ToolCluster],
                                                         client: str) -> None:
    """kafka-python, aiokafka and confluent-kafka create, describe, grow, configure and delete a
    topic through each cluster's real broker (the broker forwards to its controller): each client
    sees the same on both."""
    kafka, ours = clusters
    name = f"py-{client}"
    theirs, mine = await asyncio.gather(client_round_trip(client, kafka.bootstrap, name),
                                        client_round_trip(client, ours.bootstrap, name))
    assert mine == theirs == [{0: 1, 1: 1, 2: 1}, {i: 1 for i in range(5)}, "123456", True]


def token_step(*args: str, who: str = "alice", hmac: bool = False) -> Step:
    """kafka-delegation-tokens over SASL as ``who``; ``hmac`` appends the cluster's token HMAC."""
    def run(c: ToolCluster) -> ToolResult:
        extra = ("--hmac", c.token[1]) if hmac and c.token else ()
        return kafka_delegation_tokens("--bootstrap-server", c.sasl_bootstrap, "--command-config",
                                       str(getattr(c, who)), *args, *extra)
    return run


def test_delegation_tokens_with_kafkas_tool(clusters: tuple[ToolCluster, ToolCluster]) -> None:
    """``kafka-delegation-tokens``: alice (SASL/PLAIN) creates a token with bob as renewer, it is
    described, renewed, used to authenticate (SCRAM with tokenauth, as alice), and expired. Over
    PLAINTEXT the broker refuses to ask for one."""
    for c in clusters:
        r = token_step("--create", "--max-life-time-period", "-1", "--renewer-principal", "User:bob")(c)
        m = re.search(r"^(\S{15,})\s+(\S+)\s+User:alice\s", r.stdout, re.M)
        assert r.returncode == 0 and m, r
        c.token = (m.group(1), m.group(2))
        c.token_user = client_config(c.directory, "token", "SCRAM-SHA-256", m.group(2))
        text = c.token_user.read_text().replace('username="token"', f'username="{m.group(1)}"')
        c.token_user.write_text(text.replace('";\n', '" tokenauth="true";\n'))
    # Without --owner-principal the tool asks with an empty owner list, which matches no token
    # (Kafka's filter): that answer is compared too.
    out = play(clusters, [("describe mine", token_step("--describe"))])
    assert "Total number of tokens : 0" in out["describe mine"]
    until_equal(clusters, "describe alice's", token_step("--describe", "--owner-principal", "User:alice"),
                lambda s: "<token id>" in s)
    out = play(clusters, [
        ("renew", token_step("--renew", "--renew-time-period", "-1", hmac=True)),
        ("renew by nobody's renewer", token_step("--renew", "--renew-time-period", "-1", who="eve", hmac=True)),
        ("plaintext refused", lambda c: kafka_delegation_tokens(
            "--bootstrap-server", c.bootstrap, "--command-config", str(c.plaintext), "--create",
            "--max-life-time-period", "-1")),
    ])
    assert "Completed renew operation" in out["renew"], out["renew"]
    assert "DelegationTokenOwnerMismatchException" in out["renew by nobody's renewer"]
    assert "DelegationTokenDisabledException" in out["plaintext refused"] or \
        "not allowed" in out["plaintext refused"], out["plaintext refused"]
    # The token authenticates on the broker, as its owner: alice may see her alice- topics.
    until_equal(clusters, "list as the token", on(kafka_topics, "--list", sasl="token_user"),
                lambda s: s.startswith("exit 0"))
    out = play(clusters, [("expire", token_step("--expire", "--expiry-time-period", "-1", hmac=True))])
    assert "Completed expire operation" in out["expire"], out["expire"]
    until_equal(clusters, "describe after expiry", token_step("--describe", "--owner-principal", "User:alice"),
                lambda s: "<token id>" not in s)


async def acls_and_scram(client: str, bootstrap: str, topic: str, user: str) -> list[object]:
    admin = fleet_clients.CLIENTS[client](bootstrap)
    seen: list[object] = []
    try:
        await admin.allow_read(f"User:{user}", topic)
        seen.append(await fleet_clients.until(lambda: admin.readers(topic), what="the ACL described"))
        await admin.upsert_scram(user, 1, f"{user}-secret", 4096)  # SCRAM-SHA-256
        seen.append(await fleet_clients.until(lambda: admin.scram_mechanisms(user), what="the credential"))
    finally:
        await admin.close()
    return seen


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])  # aiokafka has no ACL or SCRAM API
async def test_python_clients_acls_and_scram_through_real_brokers(clusters: tuple[ToolCluster, ToolCluster],
                                                                  client: str) -> None:
    """An ACL created and described, and a SCRAM credential upserted and described, by each client
    that has those APIs, through each cluster's real broker: the same answers on both."""
    kafka, ours = clusters
    topic, user = f"acl-{client}", f"py-{client}"
    theirs, mine = await asyncio.gather(acls_and_scram(client, kafka.bootstrap, topic, user),
                                        acls_and_scram(client, ours.bootstrap, topic, user))
    assert mine == theirs == [[f"User:{user}"], ["SCRAM_SHA_256"]]
