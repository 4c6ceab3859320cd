"""Bounded work for any single request (docs/reliability.md): a few bytes asking for 2^31-1 partitions
are refused by arithmetic on the request, with Kafka's answer, before any placement; memory
stays within 64 MiB of the idle figure and a bystander is served afterwards. (How long each
answer takes is a figure in benchmarks/bounded_work.py, not a test.)"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import BrokerHeartbeatRequest, BrokerRegistrationRequest
from tests import harness
from tests.hostile_clients import MIB, amplifying_requests, bystander, peak_rss_kib, reset_peak_rss

pytestmark = pytest.mark.slow


async def three_unfenced_brokers(port: int, cluster_id: str) -> None:
    c = await KafkaClient.connect("127.0.0.1", port)
    reg = BrokerRegistrationRequest
    for b in (1, 2, 3):
        r = await c.request(reg(broker_id=b, cluster_id=cluster_id, incarnation_id=uuid.uuid4(),
                                listeners=[reg.Listener(name="PLAINTEXT", host="h", port=9092, security_protocol=0)],
                                features=[reg.Feature(name="metadata.version", min_supported_version=7,
                                                      max_supported_version=21)],
                                log_dirs=[uuid.uuid4()]), 3)
        assert r.error_code == 0
        hb = await c.request(BrokerHeartbeatRequest(broker_id=b, broker_epoch=r.broker_epoch,
                                                    current_metadata_offset=2**62), 1)
        assert hb.error_code == 0 and not hb.is_fenced
    await c.close()


def test_requests_that_ask_for_too_much_are_refused_by_arithmetic(tmp_path: Path) -> None:
    port, http_port = harness.free_port(), harness.free_port()
    cfg = harness.write_config(tmp_path, port=port, http_port=http_port)
    cid = harness.format_dir(cfg)
    proc = harness.spawn_controller(cfg)

    async def run() -> None:
        await three_unfenced_brokers(port, cid)
        await bystander("127.0.0.1", port, 20)  # warm: the codec and the managers are loaded
        reset_peak_rss(proc.pid)
        idle = peak_rss_kib(proc.pid)
        c = await KafkaClient.connect("127.0.0.1", port)
        for label, request, refusal in amplifying_requests():
            # A deadline so that a hang fails the test instead of stalling the suite; not a timing.
            r = await asyncio.wait_for(c.request(request, 7), 20)
            for t in r.topics:
                if refusal:
                    assert (t.error_code, t.error_message) == (ErrorCode.POLICY_VIOLATION, refusal), label
                else:
                    assert t.error_code == 0 and t.num_partitions == 9_999, (label, t)
        await c.close()
        grown = (peak_rss_kib(proc.pid) - idle) * 1024
        assert grown < 64 * MIB, f"peak RSS grew {grown / MIB:.0f} MiB"
        assert len(await bystander("127.0.0.1", port, 10)) == 10

    try:
        harness.wait_http(http_port)
        asyncio.run(run())
    finally:
        harness.stop(proc)
    assert proc.returncode == 0
