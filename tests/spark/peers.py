"""The controllers the network reader observes: a real Apache Kafka 3.9 controller and a kraftsim
one, both started by the shared harness (tests/kafka/harness.py) with the same settings."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.kafka.harness import KafkaNode, KraftsimNode
from tests.kafka.provision import why_unavailable

KINDS = ("kafka", "kraftsim")
# NoOpRecords every 50 ms keep the log moving; a snapshot every second exercises FetchSnapshot, and
# seldom reaches the high watermark (a read then has a snapshot and no log after it).
SETTINGS = {"metadata.max.idle.interval.ms": "50", "metadata.log.max.snapshot.interval.ms": "1000"}


@contextmanager
def controller(kind: str, directory: Path) -> Iterator[tuple[str, Path]]:
    """A formatted, running single-voter controller: yields ("127.0.0.1:PORT", metadata.log.dir)."""
    if kind == "kafka":
        reason = why_unavailable()
        if reason is not None:
            pytest.skip(f"no Kafka to run: {reason}")
    node = (KafkaNode if kind == "kafka" else KraftsimNode)(directory / kind, overrides=dict(SETTINGS))
    node.format()
    node.start()
    try:
        yield node.bootstrap, node.metadata_dir
    finally:
        node.stop()
