"""A small client of the fault API (``http.py``), for ``kraftsim fault``, scenarios and tests.

    from kraftsim.faults.client import FaultClient

    faults = FaultClient("127.0.0.1:9464")
    with faults.inject("request", api="BrokerHeartbeat", error="NOT_CONTROLLER", duration="10s"):
        ...  # what the brokers do meanwhile

Synchronous (the standard library's HTTP client): call it from a thread in asyncio code.
Keyword names are the fault's fields (``docs/faults.md``); a failure is :class:`FaultApiError`
with the server's one-line reason.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

TOKEN_ENV = "KRAFTSIM_FAULTS_TOKEN"


class FaultApiError(Exception):
    """The fault API refused or could not be reached (``status`` 0: no answer)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class FaultClient:
    def __init__(self, http: str, token: str | None = None, timeout: float = 10.0) -> None:
        """``http``: the process's HTTP listener, ``HOST:PORT`` or a URL. ``token``: the
        process's ``kraftsim.faults.token``, by default ``$KRAFTSIM_FAULTS_TOKEN``."""
        self.base = (http if "://" in http else f"http://{http}").rstrip("/")
        self.token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            try:
                message = json.loads(e.read()).get("error") or e.reason
            except (ValueError, AttributeError):
                message = e.reason
            raise FaultApiError(e.code, f"{self.base}: {message}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise FaultApiError(0, f"{self.base}: {getattr(reason, 'strerror', None) or reason}") from None

    def add(self, kind: str | dict[str, Any], **fields: Any) -> dict[str, Any]:
        """Inject a fault; returns it as the process reports it (its ``id``, ``seed``, ...)."""
        doc = dict(kind) if isinstance(kind, dict) else {"kind": kind}
        doc.update(fields)
        result: dict[str, Any] = self._call("POST", "/faults", doc)
        return result

    def active(self) -> list[dict[str, Any]]:
        faults: list[dict[str, Any]] = self._call("GET", "/faults")["faults"]
        return faults

    def remove(self, fault_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("DELETE", f"/faults/{fault_id}")
        return result

    def clear(self) -> list[dict[str, Any]]:
        cleared: list[dict[str, Any]] = self._call("DELETE", "/faults")["cleared"]
        return cleared

    def timeline(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = self._call("GET", "/faults/timeline")["events"]
        return events

    @contextmanager
    def inject(self, kind: str | dict[str, Any], **fields: Any) -> Iterator[dict[str, Any]]:
        """A fault for the ``with`` block (removed after it, if it has not ended by itself)."""
        fault = self.add(kind, **fields)
        try:
            yield fault
        finally:
            if any(f["id"] == fault["id"] for f in self.active()):
                try:
                    self.remove(fault["id"])
                except FaultApiError as e:
                    if e.status != 404:  # it ended between the two calls
                        raise
