"""The HTTP side (``kraftsim.http.listen``): Prometheus ``/metrics``, ``/healthz``, and
``/migration`` (the ZooKeeper migration driver's state, for ``kraftsim migration status``)."""

from __future__ import annotations

import json

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from kraftsim.controller.quorum_controller import QuorumController


def make_app(controller: QuorumController) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        body = controller.metrics.render()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(request: web.Request) -> web.Response:
        serving, doc = controller.health()
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
    return app


async def start_http(controller: QuorumController, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(make_app(controller), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    return runner
