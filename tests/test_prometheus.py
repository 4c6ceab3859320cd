"""A real Prometheus (Debian's package) scrapes a real ``kraftsim controller`` with the shipped
scrape config, then answers PromQL: the key series have the values the controller's state
implies, and every expression of the shipped Grafana dashboard returns data. This proves the
exposition format, the metric names and the dashboard's queries together."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kraftsim.rpc import registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.client import KafkaClient
from tests import harness

REPO = Path(__file__).resolve().parents[1]
PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="Debian package prometheus is not installed (.ci/install-system-deps installs it when run as root)")

K = "kafka_controller_kafkacontroller_"
E = "kafka_controller_controllereventmanager_"


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


class Prom:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def query(self, expr: str) -> list[dict[str, Any]]:
        doc = _get(f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert doc["status"] == "success", doc
        return list(doc["data"]["result"])

    def wait(self, expr: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Poll until the query returns at least one sample (scrapes come every interval)."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"no data for {expr} within {timeout}s")
            time.sleep(0.25)

    def value(self, expr: str) -> float:
        (sample,) = self.wait(expr)
        return float(sample["value"][1])


async def _load(port: int, cluster_id: str) -> None:
    """One unfenced broker and a topic of 3 partitions, so the series have non-zero values."""
    reg, hb, ct = registry.request_class(ApiKey.BROKER_REGISTRATION), registry.request_class(ApiKey.BROKER_HEARTBEAT), registry.request_class(ApiKey.CREATE_TOPICS)
    c = await KafkaClient.connect("127.0.0.1", port)
    try:
        r = await c.request(reg(broker_id=1, cluster_id=cluster_id, incarnation_id=uuid.uuid4(),
                                listeners=[reg.Listener(name="PLAINTEXT", host="h", port=9092, security_protocol=0)],
                                features=[reg.Feature(name="metadata.version", min_supported_version=7,
                                                      max_supported_version=21)],
                                log_dirs=[uuid.uuid4()]), 3)
        assert r.error_code == 0
        r = await c.request(hb(broker_id=1, broker_epoch=r.broker_epoch, current_metadata_offset=10**6), 1)
        assert r.error_code == 0 and r.is_fenced is False
        r = await c.request(ct(topics=[ct.CreatableTopic(name="orders", num_partitions=3, replication_factor=1)],
                               timeout_ms=10000), 7)
        assert r.topics[0].error_code == 0
    finally:
        await c.close()


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prom]:
    tmp = tmp_path_factory.mktemp("prometheus")
    port, http_port, prom_port = harness.free_port(), harness.free_port(), harness.free_port()
    # Idle no-op records every 200 ms keep the event-queue histograms moving; a long session
    # keeps the one broker unfenced without heartbeating it in the background.
    cfg = harness.write_config(tmp, port=port, http_port=http_port, metadata_max_idle_interval_ms=200,
                               broker_session_timeout_ms=600000)
    cluster_id = harness.format_dir(cfg)
    controller = harness.spawn_controller(cfg)
    prom: subprocess.Popen[bytes] | None = None
    try:
        harness.wait_http(http_port)
        asyncio.run(_load(port, cluster_id))

        # The shipped scrape config, its targets pointed at this controller.
        config = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.yml").read_text())
        for job in config["scrape_configs"]:
            for static in job["static_configs"]:
                static["targets"] = [f"127.0.0.1:{http_port}"]
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        with (tmp / "prometheus.log").open("w") as log:
            assert PROMETHEUS is not None
            prom = subprocess.Popen([PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}",
                                     f"--storage.tsdb.path={tmp / 'tsdb'}",
                                     f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
                                    stdout=log, stderr=subprocess.STDOUT)
        harness.wait_http(prom_port, "/-/ready", timeout=30)
        yield Prom(prom_port)
    finally:
        for proc in (prom, controller):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        if prom is not None:
            prom.wait(timeout=30)
        controller.wait(timeout=30)
    assert controller.returncode == 0, harness.controller_output(cfg)[1][-2000:]


def test_prometheus_scrapes_the_key_series(scraped: Prom) -> None:
    (up,) = scraped.wait('up{job="kraftsim"} == 1')
    assert up["metric"]["role"] == "controller"  # the shipped config's target label
    assert scraped.value(f"{K}activecontrollercount") == 1
    assert scraped.value(f"{K}activebrokercount") == 1
    assert scraped.value(f"{K}fencedbrokercount") == 0
    assert scraped.value(f"{K}globaltopiccount") == 1
    assert scraped.value(f"{K}globalpartitioncount") == 3
    assert scraped.value(f"{K}offlinepartitionscount") == 0
    assert scraped.value(f"{K}zkmigrationstate") == 0
    assert scraped.value(f"{K}lastcommittedrecordoffset") > 0
    # Histograms arrive as real Prometheus histograms: cumulative buckets up to +Inf == count.
    assert scraped.value(f'{E}eventqueueprocessingtimems_bucket{{le="+Inf"}} - ignoring(le) {E}eventqueueprocessingtimems_count') == 0
    assert scraped.value(f"{E}eventqueuetimems_count") > 0
    assert scraped.value(f"sum(rate({E}eventqueueprocessingtimems_count[1m]))") > 0


def _dashboard_exprs() -> list[tuple[str, str]]:
    board = json.loads((REPO / "deploy" / "grafana" / "kraftsim.json").read_text())
    return [(p["title"], t["expr"]) for p in board["panels"] if p["type"] != "row" for t in p["targets"]]


def test_every_dashboard_expression_returns_data(scraped: Prom) -> None:
    # Grafana's variables as a viewer gets them: All for job and instance; a rate window that
    # spans several scrapes of the shipped interval.
    exprs = _dashboard_exprs()
    assert len(exprs) >= 20
    missing = []
    deadline = time.monotonic() + 45
    for title, expr in exprs:
        query = (expr.replace("$__rate_interval", "1m").replace('"$job"', '".*"')
                 .replace('"$instance"', '".*"'))
        try:
            result = scraped.wait(query, timeout=max(1.0, deadline - time.monotonic()))
        except AssertionError:
            missing.append(f"{title}: {query}")
            continue
        values = [float(s["value"][1]) for s in result]
        if title != "Commit lag (records)":  # a lag may be negative; the rest are finite counts and times
            assert all(not math.isnan(v) and v >= 0 for v in values), (title, query, values)
    assert not missing, "dashboard queries with no data:\n" + "\n".join(missing)
