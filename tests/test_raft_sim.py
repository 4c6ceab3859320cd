"""The Raft core in the deterministic simulator (kraftsim.raft.sim): many seeds under faults with
the invariants checked after every step, the same seed replaying the same run, targeted
scenarios (leader kill, partitioned leader, divergent tail, snapshot catch-up, loss, graceful
shutdown), and the checker catching real bugs."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from kraftsim.cli.main import main as kraftsim_main
from kraftsim.metadata.batch import ControlRecordType
from kraftsim.raft.core.election_state import ElectionState
from kraftsim.raft.core.keys import OffsetAndEpoch, ReplicaKey
from kraftsim.raft.core.memory_log import MemoryLog
from kraftsim.raft.core.node import RaftNode
from kraftsim.raft.core.voters import VoterNode, VoterSet
from kraftsim.raft.core.voters_records import voters_record_of
from kraftsim.raft.sim.cluster import SimNode, history_from_log
from kraftsim.raft.sim.config import SimConfig
from kraftsim.raft.sim.invariants import InvariantChecker, InvariantViolation, NodeView
from kraftsim.raft.sim.network import isolation
from kraftsim.raft.sim.runner import Simulation, SimulationFailure, simulate

ROOT = Path(__file__).resolve().parent.parent
FETCH_TIMEOUT = 2000
ELECTION_TIMEOUT = 1000

# Each sweep: (configuration, first seed, how many seeds). Sized to run in a few seconds each.
SWEEPS = {
    "3 voters": (SimConfig(voters=3, seconds=3), 0, 800),
    "4 voters, faults every second": (SimConfig(voters=4, seconds=3, fault_interval_ms=1000), 10_000, 250),
    "5 voters and 2 observers": (SimConfig(voters=5, observers=2, seconds=3), 20_000, 80),
    "loss 15%, duplicates 10%": (SimConfig(voters=3, seconds=3, loss=0.15, duplicate=0.1), 30_000, 400),
    "Kafka's encoding, versions mixed per link": (SimConfig(voters=3, observers=1, seconds=3, wire="mixed"),
                                                  40_000, 80),
    "2 voters": (SimConfig(voters=2, seconds=3), 50_000, 250),
    "1 voter and an observer": (SimConfig(voters=1, observers=1, seconds=3), 60_000, 140),
    "voter changes: 3 voters, 2 spares": (SimConfig(voters=3, observers=2, seconds=3, voter_changes=True,
                                                    voter_change_interval_ms=400), 70_000, 150),
    "voter changes, loss 10%, duplicates 5%": (SimConfig(voters=3, observers=2, seconds=3, loss=0.1, duplicate=0.05,
                                                         voter_changes=True, voter_change_interval_ms=400),
                                               80_000, 100),
    "pre-vote (Kafka 4.0), 4 voters, faults every second": (SimConfig(voters=4, seconds=3, fault_interval_ms=1000,
                                                                      release="4.0"), 90_000, 150),
    "pre-vote, Kafka 4.1 (no candidate backoff), loss 15%, duplicates 10%": (
        SimConfig(voters=3, seconds=3, loss=0.15, duplicate=0.1, release="4.1"), 100_000, 250),
    "3.9 and 4.0 voters mixed, versions mixed per link": (SimConfig(voters=3, observers=1, seconds=3, wire="mixed",
                                                                    release="mixed"), 110_000, 100),
    "3.9 and 4.0 voters mixed, voter changes": (SimConfig(voters=3, observers=2, seconds=3, voter_changes=True,
                                                          voter_change_interval_ms=400, release="mixed"),
                                                120_000, 60),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SWEEPS))
def test_seeds_keep_every_invariant_and_converge(name: str) -> None:
    config, first, count = SWEEPS[name]
    elections = committed = 0
    for seed in range(first, first + count):
        try:
            result = simulate(config, seed)
        except SimulationFailure as e:
            pytest.fail(f"{name}: {e}")
        elections += result.elections
        committed += result.committed_records
    assert elections >= count and committed > count  # every run elected and committed something


def test_the_same_seed_replays_the_same_run_event_for_event() -> None:
    config = SimConfig(voters=3, observers=1, seconds=4, loss=0.05, duplicate=0.05)
    first = simulate(config, 7, keep_trace=True)
    again = simulate(config, 7, keep_trace=True)
    assert first.trace == again.trace and first.digest == again.digest
    assert len(first.trace) > first.steps > 100  # every event, and the start and the heal
    assert simulate(config, 8).digest != first.digest


def test_a_seed_replays_in_another_process_whatever_its_hash_seed() -> None:
    """Nothing in a run may depend on the process (set order of strings, say): the command line
    prints the same trace digest under two different PYTHONHASHSEEDs."""
    def digest(hash_seed: str) -> str:
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        out = subprocess.run([sys.executable, "-m", "kraftsim", "simulate", "--seed", "11", "--voters", "3",
                              "--seconds", "4", "--observers", "1"], env=env, cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
        return next(line.split()[1] for line in out.splitlines() if line.strip().startswith("trace"))

    assert digest("1") == digest("2") == simulate(SimConfig(voters=3, observers=1, seconds=4), 11).digest


# -- scenarios -------------------------------------------------------------------------------------

def quiet(**kw: object) -> SimConfig:
    """No nemesis and no snapshots: the scenario makes its own faults."""
    return SimConfig(faults=False, snapshot_interval_ms=0, **kw)  # type: ignore[arg-type]


def leader(sim: Simulation) -> SimNode | None:
    """The leader of the highest epoch among running nodes."""
    leaders = [sn for sn in sim.cluster.nodes.values() if sn.raft is not None and sn.raft.is_leader()]
    return max(leaders, key=lambda sn: sn.raft.epoch, default=None)  # type: ignore[union-attr]


def voters_of(sn: SimNode) -> set[int]:
    assert sn.raft is not None
    return set(sn.raft.quorum.voters.ids())


def hw(sn: SimNode) -> int:
    return -1 if sn.raft is None or sn.raft.high_watermark is None else sn.raft.high_watermark


def started(config: SimConfig, seed: int, committed: int = 10) -> tuple[Simulation, SimNode]:
    sim = Simulation(config, seed)
    sim.start()
    sim.run_until(lambda: (ld := leader(sim)) is not None and hw(ld) >= committed, 20_000, "no leader committing")
    ld = leader(sim)
    assert ld is not None
    return sim, ld


def until(sim: Simulation, done: Callable[[], bool], within_ms: int = 20_000) -> int:
    sim.run_until(done, within_ms, "scenario condition not reached")
    return sim.cluster.now_ms


@pytest.mark.parametrize("release", ["3.9", "4.0"])
def test_a_killed_leader_is_replaced_and_rejoins_without_losing_a_committed_record(release: str) -> None:
    sim, old = started(quiet(voters=3, release=release), 1)
    epoch, committed = old.raft.epoch, hw(old)  # type: ignore[union-attr]
    before = [b.data for b in old.log.batches_from(0) if b.last_offset < committed]
    sim.cluster.crash(old.node_id)
    killed_at = sim.cluster.now_ms
    elected = until(sim, lambda: (ld := leader(sim)) is not None and ld is not old and hw(ld) > committed)
    new = leader(sim)
    assert new is not None and new.raft is not None and new.raft.epoch > epoch
    # A follower notices after the fetch timeout, and stands within its election timeout.
    assert elected - killed_at <= FETCH_TIMEOUT + 2 * ELECTION_TIMEOUT + 500
    assert [b.data for b in new.log.batches_from(0) if b.last_offset < committed] == before
    sim.cluster.start(old.node_id)
    until(sim, lambda: old.raft is not None and old.raft.role == "follower" and hw(old) >= hw(new))
    assert [b.data for b in old.log.batches_from(0) if b.last_offset < committed] == before


def test_a_partitioned_leader_resigns_after_1_5_fetch_timeouts_and_the_majority_elects_another() -> None:
    sim, old = started(quiet(voters=3), 2)
    epoch = old.raft.epoch  # type: ignore[union-attr]
    sim.cluster.network.cut(1, isolation(old.node_id, list(sim.cluster.nodes)))
    cut_at = sim.cluster.now_ms
    resigned_at = until(sim, lambda: old.raft is not None and old.raft.role == "resigned")
    # Its check-quorum timer was last reset by a follower's fetch: one sent at most a long poll
    # (500 ms) and a message delay (20 ms) before the cut, or one still on its way at the cut,
    # counted again when its long poll ends.
    slack = 500 + 20
    assert cut_at - slack + 1.5 * FETCH_TIMEOUT <= resigned_at <= cut_at + slack + 1.5 * FETCH_TIMEOUT
    assert old.raft is not None and old.raft.epoch == epoch
    until(sim, lambda: (ld := leader(sim)) is not None and ld is not old and ld.raft.epoch > epoch)  # type: ignore[union-attr]


@pytest.mark.parametrize("release", ["3.9", "4.0"])
def test_a_voter_partitioned_away_and_back_disrupts_the_leader_only_without_pre_vote(release: str) -> None:
    """What pre-vote (KIP-996, Kafka 4.0) is for. A follower cut off from everyone stands again
    and again in Kafka 3.9, each time in a higher epoch; healed, its first Vote makes the stable
    leader step down, and the quorum elects again in a still higher epoch. In Kafka 4.0 it only
    asks, in the epoch it had, and nobody answers; healed, it follows the same leader in the
    same epoch, as if nothing had happened."""
    sim, ld = started(quiet(voters=3, release=release), 5)
    assert ld.raft is not None
    epoch, leader_id = ld.raft.epoch, ld.node_id
    cut_off = next(sn for sn in sim.cluster.nodes.values() if sn is not ld)
    sim.cluster.network.cut(1, isolation(cut_off.node_id, list(sim.cluster.nodes)))
    sim.run_until(lambda: False, 10 * FETCH_TIMEOUT, None)
    assert cut_off.raft is not None
    away = cut_off.raft
    assert (ld.raft.epoch, ld.raft.is_leader()) == (epoch, True)  # the other two carried on
    if release == "3.9":
        assert away.epoch > epoch + 2 and away.stats.elections_started > 2
    else:
        assert away.epoch == epoch and away.stats.elections_started == 0 and away.stats.pre_votes_started > 2
    committed, away_epoch = hw(ld), away.epoch
    sim.cluster.network.mend(1)
    until(sim, lambda: (cur := leader(sim)) is not None and cur.raft is not None and hw(cur) > committed
          and away.role == "follower" and away.leader_id == cur.node_id and hw(cut_off) >= committed)
    now = leader(sim)
    assert now is not None and now.raft is not None
    if release == "3.9":
        assert now.raft.epoch >= away_epoch > epoch + 2  # disrupted: elected again, above the cut-off voter's epoch
    else:
        assert (now.node_id, now.raft.epoch, away.epoch) == (leader_id, epoch, epoch)  # undisturbed
        assert max(sim.cluster.stats.leaders) == epoch


def test_a_rejoining_leader_truncates_its_uncommitted_tail_where_the_new_leader_diverges() -> None:
    sim, old = started(quiet(voters=3, append_interval_ms=50), 3)
    committed = hw(old)
    cluster = sim.cluster
    cluster.network.cut(1, isolation(old.node_id, list(cluster.nodes)))
    # Cut off, the old leader still takes appends until it resigns: a tail no one else has.
    until(sim, lambda: old.log.end_offset > committed + 5)
    until(sim, lambda: (ld := leader(sim)) is not None and ld is not old and hw(ld) > old.log.end_offset + 5)
    new = leader(sim)
    assert new is not None and new.raft is not None
    tail = [b for b in old.log.batches_from(committed)]
    assert any(b.epoch < new.raft.epoch for b in tail)
    cluster.network.mend(1)
    until(sim, lambda: old.raft is not None and old.raft.role == "follower" and hw(old) >= hw(new))
    assert old.log.truncations >= 1 and new.raft.stats.diverging_answers >= 1
    assert [b.data for b in old.log.batches_from(0) if b.last_offset < hw(old)] == \
        [b.data for b in new.log.batches_from(0) if b.last_offset < hw(old)]


def test_a_follower_far_behind_the_log_start_fetches_the_snapshot_in_chunks() -> None:
    sim, first = started(quiet(voters=3, max_fetch_bytes=300), 4)
    cluster = sim.cluster
    laggard = next(sn for sn in cluster.nodes.values() if sn is not first)
    cluster.crash(laggard.node_id)
    until(sim, lambda: hw(first) > laggard.log.end_offset + 30)
    for sn in cluster.nodes.values():  # both running voters snapshot and drop their logs' heads
        if sn.raft is not None:
            sid = sn.log.take_snapshot(max(b.last_offset + 1 for b in sn.log.batches_from(0)
                                           if b.last_offset < sn.log.high_watermark))
            assert sid is not None and sn.log.delete_before_snapshot(sid)
    ld = leader(sim)
    assert ld is not None and ld.log.start_offset > laggard.log.end_offset
    snapshot = ld.log.latest_snapshot_id()
    assert snapshot is not None and len(ld.log.snapshots[snapshot]) > 3 * 300  # several chunks
    cluster.start(laggard.node_id)
    until(sim, lambda: laggard.raft is not None and hw(laggard) >= hw(ld) > snapshot.offset)
    assert laggard.raft is not None and laggard.raft.stats.snapshots_fetched == 1
    assert laggard.log.start_offset >= snapshot.offset and ld.raft.stats.snapshot_redirects >= 1  # type: ignore[union-attr]


@pytest.mark.parametrize("seed", range(5))
def test_five_voters_elect_and_commit_with_15_percent_of_messages_lost(seed: int) -> None:
    # Slowly: without pre-vote (Kafka 4.0), a lost Fetch costs its request timeout, as long as
    # the fetch timeout, so the follower stands and unseats a working leader.
    started(quiet(voters=5, loss=0.15), 100 + seed, committed=10)


@pytest.mark.parametrize("release", ["3.9", "4.0"])
def test_a_leader_shut_down_gracefully_hands_over_before_any_timeout(release: str) -> None:
    """From Kafka 4.0 the successor asks first: the resigned leader grants its pre-vote (the
    other follower, which heard from that leader lately, refuses), which is a majority."""
    sim, old = started(quiet(voters=3, release=release), 5)
    epoch = old.raft.epoch  # type: ignore[union-attr]
    sim.cluster.shutdown(old.node_id)
    asked = sim.cluster.now_ms
    elected = until(sim, lambda: (ld := leader(sim)) is not None and ld.raft.epoch > epoch)  # type: ignore[union-attr]
    # EndQuorumEpoch names the most caught-up voter first, and it stands at once.
    assert elected - asked < ELECTION_TIMEOUT
    until(sim, lambda: old.raft is None)  # its shutdown completed once another led


# -- the checker ----------------------------------------------------------------------------------

class CarelessVoter(RaftNode):
    """A deliberately broken vote rule: any candidate's log counts as up to date."""

    def candidate_log_up_to_date(self, last: OffsetAndEpoch) -> bool:
        return True


def test_the_checker_catches_a_broken_vote_rule_and_the_seed_replays_the_failure() -> None:
    config = SimConfig(voters=3, seconds=10)
    failures = []
    for seed in range(20):
        try:
            simulate(config, seed, node_factory=CarelessVoter)
        except SimulationFailure as e:
            failures.append(e)
    assert len(failures) >= 10, "a careless vote rule should lose committed records on most seeds"
    first = failures[0]
    with pytest.raises(SimulationFailure) as again:
        simulate(config, first.seed, node_factory=CarelessVoter)
    assert (again.value.step, again.value.reason) == (first.step, first.reason)
    assert f"seed {first.seed}, step {first.step}" in str(again.value)
    for seed in range(20):  # the same seeds pass with Kafka's rule
        simulate(config, seed)


def test_a_spare_controller_is_added_and_then_the_leader_removed_without_faults() -> None:
    sim, first = started(quiet(voters=3, observers=1, voter_changes=True, voter_change_interval_ms=10**9), 3)
    cluster = sim.cluster
    spare = cluster.nodes[4]
    until(sim, lambda: hw(spare) >= hw(first))  # caught up as an observer
    assert spare.raft is not None and not spare.raft.quorum.is_voter()
    cluster.ask_voter_change(first, "add", 4)
    until(sim, lambda: cluster.stats.committed_changes == ["+4"])
    until(sim, lambda: all(sn.raft is not None and voters_of(sn) == {1, 2, 3, 4} for sn in cluster.nodes.values()))
    assert spare.raft.quorum.is_voter()
    # Remove the leader: it is answered once three of the four commit it, then the leader resigns.
    ld = leader(sim)
    assert ld is not None and ld.raft is not None
    epoch = ld.raft.epoch
    cluster.ask_voter_change(ld, "remove", ld.node_id)
    until(sim, lambda: len(cluster.stats.committed_changes) == 2)
    assert cluster.stats.committed_changes[1] == f"-{ld.node_id} (leader)"
    until(sim, lambda: (n := leader(sim)) is not None and n is not ld)
    new = leader(sim)
    assert new is not None and new.raft is not None and new.raft.epoch > epoch
    assert ld.raft is not None and not ld.raft.quorum.is_voter()
    assert voters_of(new) == {1, 2, 3, 4} - {ld.node_id}
    # The removed leader follows the new one as an observer; a restart reads the same from its log.
    until(sim, lambda: ld.raft is not None and ld.raft.role == "follower" and hw(ld) >= hw(new) > 0)
    assert set(history_from_log(ld.log).latest().ids()) == voters_of(new)


def view(node_id: int, log: MemoryLog, *, role: str = "follower", epoch: int = 1, leader_id: int | None = 1,
         hw: int | None = None, voted_for: int | None = None, up: bool = True) -> NodeView:
    persisted = ElectionState(epoch, leader_id=leader_id)
    return NodeView(node_id, 1, True, up, role, epoch, leader_id, hw, log, persisted, voted_for)


def committed_log(*values: bytes, epoch: int = 1) -> MemoryLog:
    log = MemoryLog()
    for v in values:
        log.append_as_leader([v], epoch=epoch, timestamp=0)
    log.flush()
    return log


@pytest.mark.parametrize("voters,history,complaint", [
    (2, [[view(1, MemoryLog(), role="leader"), view(2, MemoryLog(), role="leader", leader_id=2)]], "two leaders"),
    (1, [[view(1, MemoryLog(), epoch=3)], [view(1, MemoryLog(), epoch=2)]], "epoch went back"),
    (1, [[view(1, committed_log(b"a", b"b"), hw=2)], [view(1, committed_log(b"a", b"b"), hw=1)]],
     "high watermark went back"),
    (2, [[view(1, committed_log(b"a", b"b"), hw=2), view(2, committed_log(b"a", b"X"), hw=2)]],
     "batch at offset 1 differs on node 2"),
    (1, [[view(1, MemoryLog(), role="voted", leader_id=None, voted_for=2)],
         [view(1, MemoryLog(), role="voted", leader_id=None, voted_for=3)]], "voted for 2 and for 3"),
    (3, [[view(1, committed_log(b"a", b"b"), hw=2), view(2, MemoryLog()), view(3, MemoryLog())]],
     "durable on voters \\[1\\] only"),
])
def test_the_checker_rejects_hand_made_bad_histories(voters: int, history: list[list[NodeView]],
                                                     complaint: str) -> None:
    checker = InvariantChecker(voters=voters)
    with pytest.raises(InvariantViolation, match=complaint):
        for views in history:
            checker.check(views)


def voter_log(*sets: tuple[int, ...]) -> MemoryLog:
    """A log of VotersRecords, one batch each, in epoch 1."""
    log = MemoryLog()
    for ids in sets:
        log.append_control_as_leader([(ControlRecordType.KRAFT_VOTERS, voters_record_of(VoterSet(
            VoterNode(ReplicaKey(i, uuid.UUID(int=i))) for i in ids)))], epoch=1, timestamp=0)
    log.flush()
    return log


@pytest.mark.parametrize("sets,hw_at,complaint", [
    ([(1, 2, 3), (1, 2, 3, 4), (1, 2, 4)], 1, "holds 2 uncommitted voter changes"),
    ([(1, 2, 3), (1, 4, 5)], 2, "share no majority"),
])
def test_the_checker_rejects_two_changes_in_flight_or_sets_without_a_common_majority(
        sets: list[tuple[int, ...]], hw_at: int, complaint: str) -> None:
    log = voter_log(*sets)
    node = view(1, log, role="leader", hw=hw_at)
    node.voter_history = history_from_log(log)
    with pytest.raises(InvariantViolation, match=complaint):
        InvariantChecker(voters=3).check([node])


def test_the_checker_rejects_voter_sets_kept_below_the_log_start() -> None:
    log = voter_log((1, 2, 3), (1, 2), (1,))
    node = view(1, log, role="leader", hw=log.end_offset)
    node.voter_history = history_from_log(log)
    log.update_high_watermark(log.end_offset)
    sid = log.take_snapshot(log.end_offset)
    assert sid is not None and log.delete_before_snapshot(sid)
    with pytest.raises(InvariantViolation, match="keeps 3 voter sets below its log start 3"):
        InvariantChecker(voters=3).check([node])
    node.voter_history.truncate_old_entries(sid.offset)  # what the snapshot's writer does
    InvariantChecker(voters=3).check([node])


# -- the command line -------------------------------------------------------------------------------

def test_kraftsim_simulate_prints_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert kraftsim_main(["simulate", "--seed", "5", "--seeds", "3", "--voters", "3", "--observers", "1",
                          "--seconds", "3", "--loss", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "3 voters, 1 observers, seeds 5..7" in out
    for heading in ("elections", "committed", "faults", "network", "invariants   held at all"):
        assert heading in out


def test_kraftsim_simulate_runs_kafka_4_0_and_3_9_voters_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    assert kraftsim_main(["simulate", "--seed", "3", "--seeds", "2", "--seconds", "3", "--release", "mixed"]) == 0
    out = capsys.readouterr().out
    assert "Kafka 4.0 elections (pre-vote) on odd ids, 3.9 on even" in out
    assert "pre-votes a 3.9 voter could not take" in out and "invariants   held at all" in out


def test_kraftsim_simulate_with_voter_changes_says_which_committed(capsys: pytest.CaptureFixture[str]) -> None:
    assert kraftsim_main(["simulate", "--seed", "1", "--voters", "3", "--observers", "2", "--voter-changes",
                          "--seconds", "5", "--voter-change-interval-ms", "500"]) == 0
    out = capsys.readouterr().out
    changes = next(line for line in out.splitlines() if "changes in order:" in line)
    assert changes.split("changes in order: ")[1] != "none"
    assert "adds and" in out and "removals committed" in out


def test_kraftsim_simulate_fails_with_the_seed_and_how_to_replay(capsys: pytest.CaptureFixture[str]) -> None:
    # Crashes and cuts every 300 ms and a cluster given no time to converge: a liveness failure.
    assert kraftsim_main(["simulate", "--seed", "9", "--voters", "3", "--seconds", "3", "--fault-interval-ms", "300",
                          "--settle-seconds", "0.001"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("kraftsim simulate: failed at seed 9, step ")
    assert "no convergence" in err[0]
    assert err[0].endswith("replay: kraftsim simulate --seed 9 --voters 3 --seconds 3 --settle-seconds 0.001 "
                           "--fault-interval-ms 300")
    assert kraftsim_main(["simulate", "--voters", "0"]) == 2
