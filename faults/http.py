"""The fault API on a process's HTTP listener (the controller's ``kraftsim.http.listen``, the
fleet's), JSON in and out:

    GET    /faults            the active faults
    POST   /faults            add one (the body is the fault: {"kind": ..., ...}); 201 and the fault
    DELETE /faults/{id}       remove one; 404 if it is not active
    DELETE /faults            remove all
    GET    /faults/timeline   every start and end since the process started (the newest 10,000)

Off unless ``kraftsim.faults.enable=true``: then every path answers 404 saying so. On, it is a
door into the process, so it opens only to loopback clients, or, when ``kraftsim.faults.token``
is set, only to requests that carry the token (``Authorization: Bearer TOKEN``) from anywhere.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from typing import Any

from aiohttp import web

from kraftsim.faults.registry import FaultRegistry
from kraftsim.faults.spec import FaultError

OFF = "fault injection is off (set kraftsim.faults.enable=true to turn it on)"
LOOPBACK_ONLY = "fault injection is accepted from loopback only, unless kraftsim.faults.token is set"
NEEDS_TOKEN = "this fault endpoint needs its token (Authorization: Bearer <kraftsim.faults.token>)"


def _json(doc: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(doc), status=status, content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


def is_loopback(remote: str | None) -> bool:
    if not remote:
        return False
    try:
        addr = ipaddress.ip_address(remote.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped.is_loopback
    return addr.is_loopback


def add_routes(app: web.Application, registry: FaultRegistry | None, token: str = "") -> None:
    """The fault API on ``app``; ``registry`` None when fault injection is off."""

    def refused(request: web.Request) -> web.Response | None:
        if registry is None:
            return _error(404, OFF)
        if token:
            got = request.headers.get("Authorization", "")
            if not hmac.compare_digest(got.encode(), f"Bearer {token}".encode()):
                return _error(401, NEEDS_TOKEN)
            return None
        if not is_loopback(request.remote):
            return _error(403, LOOPBACK_ONLY)
        return None

    async def list_faults(request: web.Request) -> web.Response:
        no = refused(request)
        if no is not None:
            return no
        assert registry is not None
        return _json({"process": registry.process, "seed": registry.seed,
                      "faults": [f.to_json() for f in registry.active()]})

    async def add_fault(request: web.Request) -> web.Response:
        no = refused(request)
        if no is not None:
            return no
        assert registry is not None
        try:
            doc = json.loads(await request.read() or b"null")
        except (ValueError, UnicodeDecodeError) as e:
            return _error(400, f"the body is not JSON: {e}")
        try:
            fault = registry.add(doc)
        except FaultError as e:
            return _error(400, str(e))
        return _json(fault.to_json(), 201)

    async def remove_fault(request: web.Request) -> web.Response:
        no = refused(request)
        if no is not None:
            return no
        assert registry is not None
        fault = registry.remove(request.match_info["id"])
        if fault is None:
            return _error(404, f"no active fault {request.match_info['id']}")
        return _json(fault.to_json())

    async def clear(request: web.Request) -> web.Response:
        no = refused(request)
        if no is not None:
            return no
        assert registry is not None
        return _json({"cleared": [f.to_json() for f in registry.clear()]})

    async def timeline(request: web.Request) -> web.Response:
        no = refused(request)
        if no is not None:
            return no
        assert registry is not None
        return _json({"process": registry.process, "events": list(registry.timeline)})

    app.router.add_get("/faults", list_faults)
    app.router.add_post("/faults", add_fault)
    app.router.add_delete("/faults", clear)
    app.router.add_delete("/faults/{id}", remove_fault)
    app.router.add_get("/faults/timeline", timeline)
