"""A quorum of ``kraftsim controller`` processes for tests: formatted with one cluster id, each
with its own directory, Kafka port and HTTP port, and short Raft timings so that elections and
failovers take a fraction of a second rather than Kafka's seconds.

Every wait polls with a deadline. Processes are stopped with SIGTERM, killed with SIGKILL, or
frozen with SIGSTOP (a partitioned node: it holds its connections and answers nothing).
"""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kraftsim.cli.storage import format_storage
from kraftsim.metadata.files import META_PROPERTIES, MetaProperties
from kraftsim.metadata.log import MetadataLog
from kraftsim.raft.core.voters import VoterSet
from kraftsim.raft.dynamic_voters import read_history
from kraftsim.rpc.uuids import random_uuid, to_str
from tests import harness

# Shorter timings than Kafka's: a follower stands after 1.5 s without its leader, a voter with
# no leader waits 0.5-1 s, a leader unheard by its majority resigns after 2.25 s. A fetch waits
# up to 500 ms for data (KafkaRaftClient's fixed MAX_FETCH_WAIT_MS), so the request timeout
# and the fetch timeout stay well above that, or every idle long poll would look like a loss.
FAST_RAFT = {
    "controller_quorum_election_timeout_ms": "500",
    "controller_quorum_fetch_timeout_ms": "1500",
    "controller_quorum_election_backoff_max_ms": "500",
    "controller_quorum_request_timeout_ms": "1500",
}


@dataclass
class Node:
    node_id: int
    directory: Path
    port: int
    http_port: int
    config: Path = field(init=False)
    proc: subprocess.Popen[str] | None = None

    @property
    def data(self) -> Path:
        return self.directory / "data" / "__cluster_metadata-0"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def health(self) -> tuple[int, dict[str, object]] | None:
        """(HTTP status, /healthz document), or None when nothing answers."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/healthz", timeout=1) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")
        except (urllib.error.URLError, ConnectionError, OSError, ValueError):
            return None

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics", timeout=2) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line.startswith("kafka_controller_kafkacontroller_"):
                name, value = line.rsplit(" ", 1)
                out[name.removeprefix("kafka_controller_kafkacontroller_")] = float(value)
        return out

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self) -> str:
        out, err = harness.controller_output(self.config)
        return out + err


class Quorum:
    def __init__(self, tmp: Path, size: int = 3, first_id: int = 3000, dynamic: bool = False, observers: int = 0,
                 standalone: bool = False, **cfg: object) -> None:
        """``size`` voters; ``dynamic``: a KIP-853 quorum (every node formatted with the same
        ``--initial-controllers``, or, with ``standalone``, one voter formatted ``--standalone``,
        configured with ``controller.quorum.bootstrap.servers``), and ``observers`` more
        controllers formatted with ``--no-initial-controllers``."""
        self.tmp = tmp
        ids = range(first_id, first_id + size + observers)
        self.nodes = {i: Node(i, tmp / f"node-{i}", harness.free_port(), harness.free_port()) for i in ids}
        voter_nodes = list(self.nodes.values())[:size]
        self.directory_ids = {n.node_id: to_str(random_uuid()) for n in voter_nodes}
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.port}" for n in voter_nodes)
        if dynamic:
            quorum = {"controller_quorum_voters": "", "controller_quorum_bootstrap_servers":
                      ",".join(n.address for n in voter_nodes)}
        else:
            quorum = {"controller_quorum_voters": voters}
        settings = {**FAST_RAFT, **quorum, **cfg}
        self.cluster_id: str = to_str(random_uuid())
        initial = ",".join(f"{n.node_id}@127.0.0.1:{n.port}:{self.directory_ids[n.node_id]}" for n in voter_nodes)
        for n in self.nodes.values():
            n.directory.mkdir(parents=True)
            n.config = harness.write_config(n.directory, port=n.port, http_port=n.http_port, node_id=n.node_id,
                                            **settings)
            if dynamic and standalone and n.node_id in self.directory_ids:
                format_storage(n.config, self.cluster_id, "3.9", True, standalone=True)
                # --standalone gives the directory an id of its own.
                self.directory_ids[n.node_id] = MetaProperties.read(n.directory / "data" / META_PROPERTIES).directory_id \
                    or ""
            elif dynamic:
                voter = n.node_id in self.directory_ids
                format_storage(n.config, self.cluster_id, "3.9", True, initial_controllers=initial if voter else None,
                               no_initial_controllers=not voter)
            else:
                harness.format_dir(n.config, cluster_id=self.cluster_id)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes.values())

    def start(self, *ids: int) -> None:
        for i in ids or self.nodes:
            n = self.nodes[i]
            if not n.alive:
                n.proc = harness.spawn_controller(n.config)

    def kill(self, node_id: int) -> None:
        """kill -9: no goodbye, no flush."""
        n = self.nodes[node_id]
        assert n.proc is not None
        n.proc.kill()
        n.proc.wait(30)

    def stop(self, node_id: int) -> int:
        n = self.nodes[node_id]
        assert n.proc is not None
        return harness.stop(n.proc)

    def freeze(self, node_id: int) -> None:
        n = self.nodes[node_id]
        assert n.proc is not None
        n.proc.send_signal(signal.SIGSTOP)

    def thaw(self, node_id: int) -> None:
        n = self.nodes[node_id]
        assert n.proc is not None
        n.proc.send_signal(signal.SIGCONT)

    def stop_all(self) -> None:
        for n in self.nodes.values():
            if n.proc is not None and n.proc.poll() is None:
                n.proc.send_signal(signal.SIGCONT)
                n.proc.kill()
                n.proc.wait(30)

    def healths(self, ids: list[int] | None = None) -> dict[int, tuple[int, dict[str, object]] | None]:
        return {i: self.nodes[i].health() for i in (ids or list(self.nodes))}

    def leader(self, among: list[int] | None = None, timeout: float = 30.0,
               other_than: int | None = None) -> int:
        """The one node that is the active controller, once every other live node of ``among``
        follows it (their /healthz names it): a settled quorum."""
        ids = among or [i for i, n in self.nodes.items() if n.alive]

        def settled() -> int | None:
            health = self.healths(ids)
            active = [i for i, h in health.items() if h is not None and h[1].get("status") == "active"]
            if len(active) != 1 or active[0] == other_than:
                return None
            leader = active[0]
            for i, h in health.items():
                if i != leader and (h is None or h[0] != 200 or h[1].get("leaderId") != leader):
                    return None
            return leader

        found = poll(settled, timeout, f"no settled leader among {ids}: {self.describe()}")
        assert isinstance(found, int)
        return found

    def describe(self) -> str:
        return "; ".join(f"{i}: {h[1] if h else 'down'}" for i, h in self.healths().items())


def poll(cond: Callable[[], object], timeout: float, what: str, interval: float = 0.05) -> object:
    return harness.poll_sync(cond, timeout, interval, what=what)


# -- what a log says of its quorum (tests only) --------------------------------------------------

@dataclass(frozen=True, slots=True)
class LogVoters:
    """What the log says of the quorum: its kraft.version, and its voter set with the offset of
    the VotersRecord it came from (a snapshot's stands at the snapshot's last offset: -1 for the
    bootstrap snapshot of a fresh dynamic quorum)."""

    kraft_version: int
    voters: VoterSet | None
    offset: int


def read_voters(mlog: MetadataLog) -> LogVoters:
    """The latest kraft.version and voter set the metadata partition holds, as a controller
    reads them at start-up (``read_history``); ``voters`` is None when it holds no VotersRecord
    (a static quorum)."""
    history = read_history(mlog, VoterSet(()))
    entry = history.latest_entry()
    return LogVoters(history.kraft_version(), entry[1] if entry else None, entry[0] if entry else -1)
