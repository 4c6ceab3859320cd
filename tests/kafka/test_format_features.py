"""``format --feature name=level`` beside Kafka's storage tool of the same release: what it
prints, the bootstrap files written byte for byte (times and CRCs masked), or the refusal in
Kafka's words, for a static and a dynamic quorum's controller.
Kafka's tool runs warm through tool_server, so each case costs a fraction of a second."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kafka.releases import read_bootstrap
from tests.kafka.test_dynamic_quorum import masked, pair

pytestmark = pytest.mark.kafka

STATIC = [
    ("-f", "group.version=1"),
    ("-f", "transaction.version=1"),  # 3.9: not a production level
    ("-f", "transaction.version=2", "--release-version", "3.9"),
    ("-f", "transaction.version=0", "-f", "group.version=1", "-f", "group.version=0"),  # the last one wins
    ("-f", " share.version = 1 "),
    ("-f", "eligible.leader.replicas.version=1", "--release-version", "3.9"),  # depends on metadata.version
    ("-f", "group.version=9"),
    ("-f", "nosuch=1"),
    ("-f", "metadata.version=21"),
    ("-f", "kraft.version=0"),
    ("-f", "kraft.version=1"),
    ("-f", "group.version"),
    ("-f", "group.version=x"),
    ("-f", "group.version=70000"),
]
DYNAMIC = [
    ("--no-initial-controllers",),  # 4.4: kraft.version 1 in the bootstrap snapshot, no voters
    ("--standalone", "-f", "kraft.version=1"),
    ("--standalone", "-f", "kraft.version=0"),
    ("--no-initial-controllers", "-f", "kraft.version=0"),
    ("--no-initial-controllers", "-f", "kraft.version=1", "-f", "transaction.version=0"),
]


@pytest.mark.parametrize("release", ["3.9", "4.4"])
def test_feature_flags_write_or_refuse_what_kafkas_storage_tool_does(tmp_path: Path, release: str) -> None:
    differing = []
    outcomes = set()
    for i, args in enumerate([*((a, True) for a in STATIC), *((a, False) for a in DYNAMIC)]):
        flags, static = args
        kafka, sim = pair(tmp_path / str(i), release=release)
        if static:
            for node in (kafka, sim):
                node.overrides["controller.quorum.voters"] = f"1@127.0.0.1:{node.port}"
                node.overrides.pop("controller.quorum.bootstrap.servers")
        k = kafka.format(*flags, check=False)
        s = sim.format(*flags, check=False)
        outcomes.add(k.returncode == 0)
        if (s.returncode == 0) != (k.returncode == 0):
            differing.append((flags, k.stdout + k.stderr, s.stdout + s.stderr))
        elif k.returncode == 0:
            said = [r.stdout.replace(str(n.data_dir), "<dir>") for r, n in ((k, kafka), (s, sim))]
            written = [read_bootstrap(n.data_dir) for n in (kafka, sim)]
            # (--standalone draws a new directory id into the VotersRecord: not byte-comparable)
            same_bytes = "--standalone" in flags or all(masked(kafka.data_dir / f) == masked(sim.data_dir / f)
                                                        for f in written[0]["files"])
            if said[0] != said[1] or written[0] != written[1] or not same_bytes:
                differing.append((flags, said[0], written[0], said[1], written[1]))
        else:
            # Kafka's refusals here are uncaught exceptions' messages or its Formatter's one
            # line; kraftsim says the same words in one line.
            theirs = " ".join(" ".join(line for line in k.stderr.splitlines() if line.strip()).split())
            ours = s.stderr.strip().splitlines()
            words = ours[0].removeprefix("kraftsim format: ") if len(ours) == 1 else s.stderr
            if " ".join(words.split()) not in theirs:
                differing.append((flags, theirs[-400:], s.stderr))
    assert not differing, "\n".join(map(repr, differing))
    assert outcomes == {True, False}  # both kinds were compared
