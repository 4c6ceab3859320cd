"""What the command-line tools that talk to a controller share: bootstrap addresses, trying each
until one answers as the active controller, and failures as one line for the user.

``kraftsim features`` and ``kraftsim metadata-quorum`` mirror Kafka's admin tools, whose admin
client walks its bootstrap list the same way.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import TypeVar

from kraftsim.cli.common import CommandError, UsageError
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.codec_errors import CodecError

CONNECT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 30.0

T = TypeVar("T")


class NotController(Exception):
    """The node answered NOT_CONTROLLER: try the next bootstrap address, as the admin client would."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def parse_bootstrap(text: str, prog: str) -> list[tuple[str, int]]:
    """``h:p,h2:p2`` (IPv6 as ``[::1]:9093``) into addresses, refusing anything else."""
    out: list[tuple[str, int]] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"{prog}: invalid bootstrap address {part!r} (expected host:port)")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise UsageError(f"{prog}: no bootstrap address given")
    return out


async def on_any(addresses: list[tuple[str, int]], action: Callable[[KafkaClient], Awaitable[T]],
                 client_id: str) -> T:
    """Run ``action`` on the first address that answers (and is the active controller)."""
    last = "no address tried"
    for host, port in addresses:
        try:
            client = await KafkaClient.connect(host, port, client_id=client_id, timeout=CONNECT_TIMEOUT_S)
        except (TimeoutError, OSError) as e:
            last = f"Could not connect to {host}:{port}: {os_reason(e)}"
            continue
        try:
            return await action(client)
        except NotController as e:
            last = e.message
        except (TimeoutError, OSError, ValueError, CodecError) as e:
            # ConnectionClosed is an OSError; CodecError is a response we cannot decode.
            last = f"Request to {host}:{port} failed: {os_reason(e)}"
        finally:
            await client.close()
    raise CommandError(last)


def os_reason(e: BaseException) -> str:
    if isinstance(e, asyncio.TimeoutError):
        return "timed out"
    if isinstance(e, OSError) and e.errno and e.errno > 0:
        return os.strerror(e.errno)  # "Connection refused", not asyncio's "Connect call failed (...)"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__
