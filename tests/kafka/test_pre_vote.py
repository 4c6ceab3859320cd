"""Pre-vote (KIP-996) against real Kafka 4.0 controllers: a static quorum of one kraftsim voter
of release 4.0 and two Kafka 4.0.2 controllers, each formatted by its own side's tool.

1. The kraftsim voter, quickest to stand, asks for pre-votes in epoch 0 (Vote v2, PreVote);
   Kafka's voters grant them (their logs say so), and it leads epoch 1.
2. It is killed (SIGKILL): the two Kafka voters elect one of them in epoch 2, through their own
   pre-votes; the kraftsim voter comes back and follows.
3. The Kafka leader is killed. The kraftsim voter's fetch timeout is the shorter, so it asks
   first, in epoch 2: the other Kafka voter, which heard from its leader lately, refuses, and
   the kraftsim voter does not stand (a 3.9 voter would have, and won: the other would have
   voted for it). When that Kafka voter's own timeout runs out it asks in turn; the kraftsim
   voter grants its pre-vote and then its vote (the third voter is dead: both are needed), and
   Kafka's voter leads epoch 3. One epoch per election, and the kraftsim voter's
   ``quorum-state`` is what the Kafka voter wrote in the same place an epoch earlier (Kafka 4.0
   keeps the vote beside the leader it learnt).

About 20 s: two Kafka JVMs, three elections, no brokers."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kraftsim.rpc.client import KafkaClient
from tests.harness import free_port
from tests.kafka.harness import KafkaNode, KraftsimNode, Node, random_cluster_id
from tests.kafka.provision import RELEASES
from tests.kafka.test_mixed_quorum import EAGER, PATIENT, describe_quorum_request

pytestmark = [pytest.mark.kafka, pytest.mark.story]  # kills and elections, as test_mixed_quorum.py

SIM, K1, K2 = 3001, 3002, 3003
RELEASE = "4.0"


async def leader_and_epoch(nodes: dict[int, Node]) -> tuple[int, int, dict[int, int], int] | None:
    """(leader, epoch, each voter's log end, high watermark) as a running leader describes the
    quorum, or None while no running node leads."""
    for node in nodes.values():
        if not node.running:
            continue
        host, port = node.bootstrap.rsplit(":", 1)
        try:
            client = await KafkaClient.connect(host, int(port), client_id="pre-vote-test")
        except OSError:
            continue
        try:
            r = await client.request(describe_quorum_request(), 1)
        except (TimeoutError, OSError, ConnectionError):
            continue
        finally:
            await client.close()
        if r.error_code or not r.topics or r.topics[0].partitions[0].error_code:
            continue
        p = r.topics[0].partitions[0]
        return p.leader_id, p.leader_epoch, {v.replica_id: v.log_end_offset for v in p.current_voters}, \
            p.high_watermark
    return None


Check = Callable[[int, int, dict[int, int], int], bool]


async def quorum_state(node: Node, leader: int) -> dict[str, object]:
    """The node's ``quorum-state`` once it names ``leader`` (a voter may vote before it hears
    who won: BeginQuorumEpoch, or a Fetch's answer, tells it)."""
    path = node.data_dir / "__cluster_metadata-0" / "quorum-state"
    deadline = time.monotonic() + 30
    while (state := json.loads(path.read_text()))["leaderId"] != leader:
        if time.monotonic() > deadline:
            raise AssertionError(f"{node}: quorum-state does not name leader {leader} within 30s: {state}")
        await asyncio.sleep(0.1)  # the pace of the poll; the deadline above bounds it
    assert isinstance(state, dict)
    return state


async def wait_for(nodes: dict[int, Node], what: str, ok: Check, timeout: float = 60) -> tuple[int, int]:
    """Poll DescribeQuorum until ``ok(leader, epoch, ends, hw)`` holds; (leader, epoch)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await leader_and_epoch(nodes)
        if last is not None and ok(*last):
            return last[0], last[1]
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout}s (last: {last})")


def caught_up(nodes: dict[int, Node]) -> Check:
    """Every running voter holds the leader's whole log, all of it committed."""
    def ok(leader: int, epoch: int, ends: dict[int, int], hw: int) -> bool:
        return hw == ends[leader] and all(ends[i] == hw for i, n in nodes.items() if n.running)
    return ok


def kafka_votes(node: Node, candidate: int) -> list[tuple[bool, int, bool]]:
    """What a Kafka 4.0 voter's log says it answered ``candidate``: (pre-vote, epoch, granted)."""
    out = []
    for line in node.log_path.read_text(errors="replace").splitlines():
        m = re.search(r"Vote request VoteRequestData\(.*replicaEpoch=(\d+), replicaId=(\d+),.*preVote=(\w+)\)\]\)\]\) "
                      r"with epoch \d+ is (granted|rejected)", line)
        if m and int(m.group(2)) == candidate:
            out.append((m.group(3) == "true", int(m.group(1)), m.group(4) == "granted"))
    return out


async def test_a_kraftsim_voter_and_kafka_4_0_voters_elect_each_other_through_pre_votes(tmp_path: Path) -> None:
    cid = random_cluster_id()
    ports = {i: free_port() for i in (SIM, K1, K2)}
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
    common = {"controller.quorum.voters": voters, "controller.quorum.append.linger.ms": "0",
              "metadata.max.idle.interval.ms": "0"}
    nodes: dict[int, Node] = {
        SIM: KraftsimNode(tmp_path / "kraftsim", node_id=SIM, cluster_id=cid, port=ports[SIM], release_version=RELEASE,
                          overrides={**EAGER, **common, "kraftsim.release": RELEASE}),
        # The Kafka voters' fetch timeouts differ: with the same one, both would ask at once once
        # their leader died, grant each other's pre-vote, and split the vote (Kafka 4.0 does).
        **{i: KafkaNode(tmp_path / f"kafka-{i}", node_id=i, cluster_id=cid, port=ports[i], release_version=RELEASE,
                        kafka_version=RELEASES[RELEASE], overrides={**PATIENT, **common, **fetch})
           for i, fetch in ((K1, {}), (K2, {"controller.quorum.fetch.timeout.ms": "4500"}))},
    }
    sim = nodes[SIM]
    try:
        for n in nodes.values():
            n.format()
        for n in nodes.values():
            n.start(wait=False)

        # 1. The kraftsim voter asks in epoch 0, Kafka's voters grant, it leads epoch 1.
        leader, epoch = await wait_for(nodes, "the kraftsim voter leads with both Kafka voters caught up",
                                       lambda ld, e, ends, hw: ld == SIM and caught_up(nodes)(ld, e, ends, hw),
                                       timeout=120)
        assert epoch == 1
        granted = [kafka_votes(nodes[k], SIM) for k in (K1, K2)]
        assert any((True, 0, True) in g for g in granted), granted  # a pre-vote, in epoch 0, granted
        assert any((False, 1, True) in g for g in granted), granted  # then the vote, in epoch 1

        # 2. Killed: the Kafka voters elect one of them, one epoch up; the kraftsim voter follows.
        sim.kill()
        leader, epoch = await wait_for(nodes, "a Kafka voter leads after the kraftsim leader was killed",
                                       lambda ld, e, ends, hw: ld in (K1, K2))
        assert epoch == 2
        sim.start(wait=False)
        await wait_for(nodes, "the kraftsim voter caught up with the Kafka leader",
                       lambda ld, e, ends, hw: ld == leader and caught_up(nodes)(ld, e, ends, hw))
        other = K2 if leader == K1 else K1
        # What Kafka 4.0 writes for a voter that voted for the leader it now follows: both.
        kafka_state = await quorum_state(nodes[other], leader)
        assert (kafka_state["leaderEpoch"], kafka_state["votedId"]) == (2, leader), kafka_state

        # 3. The Kafka leader is killed: the kraftsim voter asks first and is refused; the other
        # Kafka voter asks next, the kraftsim voter grants, and Kafka's voter leads epoch 3.
        nodes[leader].kill()  # SIGKILL
        new, epoch = await wait_for({SIM: sim, other: nodes[other]}, "a leader after the Kafka leader was killed",
                                    lambda ld, e, ends, hw: e > 2)
        assert (new, epoch) == (other, 3)
        refused = [v for v in kafka_votes(nodes[other], SIM) if v[1] == 2]
        assert refused and all(pre and not ok for pre, _, ok in refused), refused
        log = sim.log_path.read_text(errors="replace")
        assert re.search(rf"pre-vote from {other}:\S+ in epoch 2 .*granted", log), log[-3000:]
        assert re.search(rf"vote request from {other}:\S+ in epoch 3 .*granted", log), log[-3000:]
        # The kraftsim voter's quorum-state, in the same place, is what Kafka's voter wrote.
        assert await quorum_state(sim, other) == {**kafka_state, "leaderId": other, "leaderEpoch": 3, "votedId": other}
    finally:
        for n in nodes.values():
            n.kill()
