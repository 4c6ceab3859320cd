"""kraftsim's directory lock is Kafka's: the same POSIX record lock on the same ``.lock`` file
(``metadata/dirlock.py``), so a real Kafka process and kraftsim refuse each other's live
directories, as two Kafka processes do."""

from __future__ import annotations

import pytest

from tests.kafka.conftest import PairNodes
from tests.kafka.harness import kraftsim_cli, metadata_shell

pytestmark = pytest.mark.kafka


def test_kafka_and_kraftsim_refuse_each_others_live_directory(shared_nodes: PairNodes) -> None:
    if not all(node.running for node in shared_nodes.nodes):
        shared_nodes.reset()
    kafka, ours = shared_nodes.kafka, shared_nodes.kraftsim

    # Kafka's metadata shell takes the lock of the directory it reads: kraftsim holds it.
    segment = sorted((ours.metadata_dir / "__cluster_metadata-0").glob("*.log"))[0]
    r = metadata_shell("--snapshot", str(segment), "ls", "/")
    assert r.returncode != 0 and f"Unable to lock {ours.metadata_dir}" in r.stdout + r.stderr, r

    # kraftsim's format (which writes every directory it is given) on a live Kafka controller's
    # directory: the lock Kafka's RaftManager holds refuses it, and names the JVM.
    assert kafka.proc is not None
    r = kraftsim_cli("format", "-t", kafka.cluster_id, "-c", str(kafka.properties_path), "--ignore-formatted")
    assert r.returncode == 1, r
    assert (f"Failed to acquire lock on file .lock in {kafka.metadata_dir}: another process is using this "
            f"directory") in r.stderr, r.stderr
    assert f"process {kafka.proc.pid} holds the lock" in r.stderr, r.stderr
