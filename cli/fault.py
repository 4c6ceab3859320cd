"""``kraftsim fault add|list|clear``: faults injected into a running controller or fleet through
its HTTP listener (``/faults``: off unless the process runs with ``kraftsim.faults.enable=true``).

    kraftsim fault add request api=BrokerHeartbeat error=NOT_CONTROLLER duration=10s
    kraftsim fault add network partition brokers=2 duration=30s
    kraftsim fault --http 127.0.0.1:9465 add silence pick=3 duration=20s
    kraftsim fault list
    kraftsim fault clear f2          (no id: every active fault)

A fault's fields are ``NAME=VALUE`` words (a bare ``NAME`` is ``NAME=true``); a value is read as
JSON where it is JSON (numbers, true, [1, 2], {"metadata.version": [1, 7]}), as text otherwise
(``10s``, ``1,2``). The kinds and their fields: ``docs/faults.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from kraftsim.cli.common import CommandError, UsageError

PROG = "kraftsim fault"
DEFAULT_HTTP = "127.0.0.1:9464"


def register(sub: Any) -> None:
    p = sub.add_parser("fault", help="inject faults into a running controller or fleet (kraftsim.faults.enable)",
                       description="Faults on demand, through a process's HTTP listener (docs/faults.md).")
    p.add_argument("--http", default=DEFAULT_HTTP, metavar="HOST:PORT",
                   help=f"the controller's or fleet's HTTP listener (default {DEFAULT_HTTP})")
    p.add_argument("--token", default=None, help="its kraftsim.faults.token (default: $KRAFTSIM_FAULTS_TOKEN)")
    fsub = p.add_subparsers(dest="fault_command", required=True, parser_class=type(p))
    a = fsub.add_parser("add", help="inject a fault: KIND then NAME=VALUE fields")
    a.add_argument("kind", metavar="KIND", help="request, network, stall, resign, disk, clock-jump, voter-partition; "
                                                "on a fleet: silence, flap, restart, lag, features")
    a.add_argument("fields", nargs="*", metavar="NAME=VALUE", help="the fault's fields (docs/faults.md)")
    a.add_argument("--json", action="store_true", help="print the fault as JSON")
    a.set_defaults(func=_add)
    ls = fsub.add_parser("list", help="the active faults")
    ls.add_argument("--json", action="store_true", help="one JSON document")
    ls.set_defaults(func=_list)
    c = fsub.add_parser("clear", help="remove the faults named, or every active fault")
    c.add_argument("ids", nargs="*", metavar="ID")
    c.set_defaults(func=_clear)


def fields_of(words: list[str]) -> dict[str, Any]:
    """``NAME=VALUE`` words as a fault's JSON fields."""
    doc: dict[str, Any] = {}
    for word in words:
        name, sep, text = word.partition("=")
        name = name.strip()
        if not name:
            raise UsageError(f"{PROG} add: {word!r} is not NAME=VALUE")
        if not sep:
            doc[name] = True
            continue
        try:
            doc[name] = json.loads(text)
        except ValueError:
            doc[name] = text
    return doc


def _client(args: argparse.Namespace) -> Any:
    from kraftsim.faults.client import FaultClient

    return FaultClient(args.http, args.token)


def _call(what: Any) -> Any:
    from kraftsim.faults.client import FaultApiError

    try:
        return what()
    except FaultApiError as e:
        raise CommandError(f"{PROG}: {e}") from None


def line(fault: dict[str, Any], now_ms: int | None = None) -> str:
    """One fault on one line: id, what, acts so far, what is left of it."""
    left = []
    if fault.get("expires_ms") is not None and fault.get("state") == "active":
        now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        left.append(f"{max(0, fault['expires_ms'] - now) / 1000:.1f} s left")
    if fault.get("remaining") is not None:
        left.append(f"{fault['remaining']} left")
    text = f"{fault['id']}\t{fault['description']}\tacted {fault['hits']} time(s)"
    if left:
        text += "\t" + ", ".join(left)
    if fault.get("decisions"):
        text += "\t" + " ".join(f"{k}={json.dumps(v)}" for k, v in fault["decisions"].items())
    return text + f"\tseed {fault['seed']}"


def _add(args: argparse.Namespace) -> int:
    doc = {"kind": args.kind, **fields_of(args.fields)}
    fault = _call(lambda: _client(args).add(doc))
    print(json.dumps(fault) if args.json else line(fault))
    return 0


def _list(args: argparse.Namespace) -> int:
    faults = _call(lambda: _client(args).active())
    if args.json:
        print(json.dumps(faults))
    else:
        for fault in faults:
            print(line(fault))
    return 0


def _clear(args: argparse.Namespace) -> int:
    client = _client(args)
    if not args.ids:
        cleared = _call(client.clear)
    else:
        cleared = [_call(lambda i=i: client.remove(i)) for i in args.ids]
    for fault in cleared:
        print(f"{fault['id']}\tremoved after acting {fault['hits']} time(s): {fault['description']}")
    return 0
