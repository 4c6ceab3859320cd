"""The fleet's HTTP listener (``--override kraftsim.http.listen=HOST:PORT``; none by default):
``/healthz`` (the brokers' states, and the injected faults active), ``/metrics`` (the fleet's
counters and the fault counters, in Prometheus' text format) and ``/faults`` (``kraftsim.faults``'
API, off unless ``kraftsim.faults.enable=true``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kraftsim.faults.http import add_routes as add_fault_routes

if TYPE_CHECKING:
    from kraftsim.broker.fleet import Fleet


class FleetCollector(Collector):
    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    def collect(self) -> Iterator[Metric]:
        fleet = self.fleet
        states = GaugeMetricFamily("kraftsim_fleet_brokers", "Simulated brokers, by state as the metadata log says "
                                   "(registered, unfenced, fenced, ...) or as the fleet runs them", labels=["state"])
        if fleet.status is not None:
            for state, n in fleet.status.counts().items():
                states.add_metric([state], n)
        yield states
        counters = CounterMetricFamily("kraftsim_fleet_events", "What the brokers did and heard (heartbeats, "
                                       "errors, registrations, restarts, ...)", labels=["event"])
        for name, n in sorted((fleet.shared.counters if fleet.shared is not None else {}).items()):
            counters.add_metric([name], n)
        yield counters
        offset = GaugeMetricFamily("kraftsim_fleet_applied_offset", "The metadata offset the fleet has applied")
        offset.add_metric([], fleet.observer.applied_offset if fleet.observer is not None else -1)
        yield offset


async def start_http(fleet: Fleet, host: str, port: int) -> web.AppRunner:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector(fleet))
    if fleet.faults is not None:
        registry.register(fleet.faults.collector())

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(request: web.Request) -> web.Response:
        doc: dict[str, object] = {"status": "running", "clusterId": fleet.cluster_id,
                                  "brokers": fleet.status.counts() if fleet.status is not None else {}}
        if fleet.faults is not None:
            doc["injectedFaults"] = fleet.faults.health()
        return web.Response(text=json.dumps(doc), content_type="application/json")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    add_fault_routes(app, fleet.faults, fleet.options.faults_token)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, reuse_address=True).start()
    return runner
