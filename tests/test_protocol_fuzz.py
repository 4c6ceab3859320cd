"""Fuzzed frames against a live controller process (120,000 a run): no crash, no hang, every
frame answered or its connection closed, no internal fault counted, memory bounded, and a fresh
client is served afterwards. The frames: Hypothesis draws a well-formed request of any API and
version from the schemas, then 49 raw mutations of its bytes follow it (tests/protocol_fuzz.py)."""

from __future__ import annotations

import asyncio
import os
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftsim.rpc import registry
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.messages import ApiVersionsRequest, CreateTopicsRequest
from tests import harness
from tests.hostile_clients import MIB, rss_kib
from tests.message_strategies import WORDS, message_strategy
from tests.protocol_fuzz import FuzzClient, encode, request_kinds

pytestmark = pytest.mark.slow

# Each run draws a new seed, so coverage grows across runs; 120,000 frames keep the suite in its budget.
FRAMES = int(os.environ.get("KRAFTSIM_FUZZ_FRAMES", "120000"))
MUTATIONS = 49
KINDS = request_kinds()
# A fuzzed name in the message may hold a newline: the message runs to "; renouncing" across lines.
FAULT_LINE = re.compile(r"event failed with \w+ \(treated as UnknownServerException\) at epoch \d+: (.*?); renouncing",
                        re.S)
# Inputs Kafka 3.9 itself treats as a fault of the event (a non-ApiException: the client gets
# UNKNOWN_SERVER_ERROR, MetadataErrorCount counts it, the controller renounces and, as the only
# voter, is elected again), checked against a real 3.9.2 controller when these APIs were built.
KAFKA_FAULTS = {
    "Unknown security protocol": "ControllerRegistration (and BrokerRegistration) listeners: SecurityProtocol.forId "
                                 "has no such protocol and the handler throws",
    "Unknown config operation": "IncrementalAlterConfigs: OpType.forId has no such operation and the handler throws",
}


def test_fuzzed_frames_are_answered_or_closed_and_nothing_breaks(tmp_path: Path) -> None:
    port, http_port = harness.free_port(), harness.free_port()
    # NoOps every 500 ms: a fuzzed Fetch that long-polls at the log's end is woken by them.
    cfg = harness.write_config(tmp_path, port=port, http_port=http_port, metadata_max_idle_interval_ms=500)
    cluster_id = harness.format_dir(cfg)
    proc = harness.spawn_controller(cfg)
    seed = int(os.environ.get("KRAFTSIM_FUZZ_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    client = FuzzClient("127.0.0.1", port)
    words = (*WORDS, cluster_id)
    try:
        harness.wait_http(http_port)
        idle = rss_kib(proc.pid)

        @settings(max_examples=max(1, FRAMES // (MUTATIONS + 1)), deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(data=st.data())
        def play(data: st.DataObject) -> None:
            key, version = data.draw(st.sampled_from(KINDS), label="request")
            message = data.draw(message_strategy(registry.request_class(key), version, words), label="message")
            client.play(encode(message, key, version, rng.randrange(2**31)), rng, MUTATIONS)

        try:
            play()
        except Exception as e:  # any failure names its seed, so it can be replayed
            raise AssertionError(f"seed {seed}: {type(e).__name__}: {e}; controller log tail: "
                                 f"{harness.controller_output(cfg)[1][-2000:]}") from e
        finally:
            client.close()
        assert proc.poll() is None, f"seed {seed}: the controller died: {harness.controller_output(cfg)[1][-3000:]}"
        t = client.tally
        assert t.frames >= FRAMES and t.answered + t.closed == t.frames
        assert t.refused < t.frames // 100, f"seed {seed}: {t.refused} refused connections"
        assert t.answered > FRAMES // 50 and t.closed > FRAMES // 2, t  # both outcomes really happen
        grown = (rss_kib(proc.pid) - idle) * 1024
        assert grown < 128 * MIB, f"RSS grew by {grown / MIB:.0f} MiB"
        metrics = harness.wait_http(http_port, "/metrics")
        errors = re.search(r"^kafka_controller_kafkacontroller_metadataerrorcount (\S+)$", metrics, re.M)
        assert errors is not None
        faults = FAULT_LINE.findall(harness.controller_output(cfg)[0])
        assert float(errors.group(1)) == len(faults), "every fault counted once, and logged"
        unexplained = [f for f in faults if not any(f.startswith(k) for k in KAFKA_FAULTS)]
        assert not unexplained, f"seed {seed}: bad input became a fault Kafka does not have: {unexplained[:3]}"

        async def fresh_client() -> None:
            c = await KafkaClient.connect("127.0.0.1", port)
            try:
                r = await c.request(ApiVersionsRequest(client_software_name="after", client_software_version="1"), 3)
                assert r.error_code == 0
                ct = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
                    name="after-the-fuzz", num_partitions=1, replication_factor=1)], timeout_ms=5000, validate_only=True)
                r = await c.request(ct, 7)
                assert r.topics[0].name == "after-the-fuzz"
            finally:
                await c.close()

        asyncio.run(fresh_client())
        print(f"protocol fuzz: {t.frames} frames, {t.answered} answered, {t.closed} closed, {t.refused} connects refused and retried, 0 crashes, "
              f"{len(faults)} faults as Kafka has them (seed {seed}); {dict(t.by_kind)}")
    finally:
        harness.stop(proc, 60)
    out, err = harness.controller_output(cfg)
    assert proc.returncode == 0, err[-3000:]
    both = out + err
    at = both.find("Traceback")
    assert at < 0, f"seed {seed}: {both[max(0, at - 1500):at + 2500]}"
