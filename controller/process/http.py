"""The HTTP side (``kraftsim.http.listen``): Prometheus ``/metrics``, ``/healthz``,
``/migration`` (the ZooKeeper migration driver's state, for ``kraftsim migration status``), and
``/faults`` (injected faults, ``kraftsim.faults.http``: off unless ``kraftsim.faults.enable``)."""

from __future__ import annotations

import json

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from kraftsim.controller.quorum_controller import QuorumController
from kraftsim.faults.http import add_routes as add_fault_routes
from kraftsim.faults.registry import FaultRegistry


def make_app(controller: QuorumController, faults: FaultRegistry | None = None,
             faults_token: str = "") -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        body = controller.metrics.render()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(request: web.Request) -> web.Response:
        serving, doc = controller.health()
        if faults is not None:  # so that nobody takes an injected fault for a real one
            doc["injectedFaults"] = faults.health()
        return web.Response(text=json.dumps(doc), status=200 if serving else 503, content_type="application/json")

    async def migration(request: web.Request) -> web.Response:
        runner = controller.migration
        doc: dict[str, object] = {"enabled": runner is not None,
                                  "zkMigrationState": controller.image.migration.state.name}
        if runner is not None:
            doc.update(runner.status())
            committed = controller.raft.committed_offset if controller.raft is not None else -1
            doc["lastCommittedOffset"] = committed
        return web.Response(text=json.dumps(doc), content_type="application/json")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/migration", migration)
    add_fault_routes(app, faults, faults_token)
    return app


async def start_http(controller: QuorumController, host: str, port: int, faults: FaultRegistry | None = None,
                     faults_token: str = "") -> web.AppRunner:
    runner = web.AppRunner(make_app(controller, faults, faults_token), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    return runner
