"""The Raft node's outbound requests on real sockets: one connection per peer, as Kafka's
KafkaNetworkChannel keeps them through its NetworkClient (client id ``raft-client-<id>``).

A connection asks ApiVersions first and every request then goes at the highest version both
sides speak, shaped for it (``rpcs.for_version``: the replica id of a Fetch below v15). This side
speaks Kafka 3.9's versions but where ``speaks`` says otherwise (a controller of Kafka 4.0 or
later: Vote v2, which carries a pre-vote; of 4.1 or later: Fetch v18, with the fetcher's high
watermark; each to a peer that serves it). The node
keeps at most one request in flight per peer; each answer goes back to it by the node's own
correlation id. A request that cannot be sent (the connection is refused, or the peer is in its
reconnect backoff), whose connection drops, or that is not answered within
``controller.quorum.request.timeout.ms`` (the connection is then closed, as NetworkClient closes
it) is failed with BROKER_NOT_AVAILABLE, as Kafka completes a disconnected request; an answer
the peer cannot give at any version we speak, or a request its version cannot carry (a pre-vote
to a Kafka 3.9 voter, which serves Vote v1 at most: Kafka's client fails it so, before it leaves)
is failed with UNSUPPORTED_VERSION. Failures are
reported on the next turn of the event loop, never inside the call that sent the request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kraftsim.raft.core import rpcs
from kraftsim.raft.core.events import OutboundRequest, RaftResponse
from kraftsim.raft.core.voters import Address
from kraftsim.raft.cuts import LinkCuts
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.codec_errors import CodecError, UnsupportedVersionError
from kraftsim.rpc.error_codes import ErrorCode

log = logging.getLogger("kraftsim.raft")

RECONNECT_BACKOFF_MS = 50  # KafkaRaftManager's NetworkClient: reconnect.backoff.ms
RECONNECT_BACKOFF_MAX_MS = 500  # ... and reconnect.backoff.max.ms

ResponseSink = Callable[[int, int, RaftResponse], None]  # (peer, correlation id, response)
FailureSink = Callable[[int, int, int, int], None]  # (peer, correlation id, api key, error code)


@dataclass(eq=False)
class _Peer:
    node_id: int
    address: Address
    client: KafkaClient | None = None
    connecting: asyncio.Task[None] | None = None
    queued: list[OutboundRequest] = field(default_factory=list)
    failures: int = 0  # connection attempts failed in a row
    backoff_until: float = 0.0  # loop time before which no new connection is tried

    def backoff_s(self) -> float:
        return min(RECONNECT_BACKOFF_MS * 2 ** max(0, self.failures - 1), RECONNECT_BACKOFF_MAX_MS) / 1000


class RaftNetwork:
    def __init__(self, client_id: str, request_timeout_ms: int, on_response: ResponseSink,
                 on_failure: FailureSink, speaks: Mapping[int, tuple[int, int]] | None = None) -> None:
        self.client_id = client_id
        self.speaks = dict(speaks or {})  # per api key, the versions spoken instead of 3.9's
        self.request_timeout_s = request_timeout_ms / 1000
        self.on_response = on_response
        self.on_failure = on_failure
        self._peers: dict[int, _Peer] = {}
        self._closed = False
        self.cuts = LinkCuts()  # an injected voter partition's cut links (raft/cuts.py)

    def send(self, out: OutboundRequest) -> None:
        if self._closed:
            return
        if out.address is None:
            self._fail_soon(out, ErrorCode.BROKER_NOT_AVAILABLE)  # KafkaNetworkChannel: no node, no send
            return
        if self.cuts and self.cuts.mute_to(out.destination):
            self._fail_later(out)  # lost on the way: unanswered until the request timeout
            return
        peer = self._peers.get(out.destination)
        if peer is None or peer.address != out.address:
            if peer is not None:
                self._drop(peer, f"its address changed to {out.address}")
            peer = self._peers[out.destination] = _Peer(out.destination, out.address)
        client = peer.client
        if client is not None and not client.closed:
            self._transmit(peer, client, out)
            return
        loop = asyncio.get_running_loop()
        if peer.connecting is None and loop.time() < peer.backoff_until:
            self._fail_soon(out, ErrorCode.BROKER_NOT_AVAILABLE)  # the connection failed: no new one yet
            return
        peer.queued.append(out)
        if peer.connecting is None:
            peer.connecting = loop.create_task(self._connect(peer), name=f"kraftsim-raft-connect-{peer.node_id}")

    async def _connect(self, peer: _Peer) -> None:
        try:
            client = await KafkaClient.connect(peer.address.host, peer.address.port, client_id=self.client_id,
                                               timeout=self.request_timeout_s)
            client.speaks = {**client.speaks, **self.speaks}
            try:
                await asyncio.wait_for(client.negotiate(), self.request_timeout_s)
            except BaseException:
                client.abort()
                raise
        except asyncio.CancelledError:
            self._fail_queued(peer)
            raise
        except (OSError, TimeoutError, CodecError, ValueError) as e:
            peer.connecting = None
            peer.failures += 1
            peer.backoff_until = asyncio.get_running_loop().time() + peer.backoff_s()
            if peer.failures == 1:
                log.info("cannot connect to voter %d at %s: %s", peer.node_id, peer.address, e)
            self._fail_queued(peer)
            return
        peer.connecting = None
        if self._closed or self._peers.get(peer.node_id) is not peer:
            client.abort()
            self._fail_queued(peer)
            return
        if peer.failures:
            log.info("connected to voter %d at %s", peer.node_id, peer.address)
        peer.failures = 0
        peer.client = client
        queued, peer.queued = peer.queued, []
        for out in queued:
            self._transmit(peer, client, out)

    def _transmit(self, peer: _Peer, client: KafkaClient, out: OutboundRequest) -> None:
        message = out.message
        api_key = type(message).api_key()
        assert api_key is not None
        try:
            version = client.pick_version(api_key, type(message))
        except ValueError:
            self._fail_soon(out, ErrorCode.UNSUPPORTED_VERSION)
            return
        try:
            fut = client.send(rpcs.for_version(message, version), version, correlation_id=out.correlation_id)
        except UnsupportedVersionError:
            self._fail_soon(out, ErrorCode.UNSUPPORTED_VERSION)  # encoded before any byte is written
            return
        except (OSError, CodecError):
            self._drop(peer, "it closed")
            self._fail_soon(out, ErrorCode.BROKER_NOT_AVAILABLE)
            return
        loop = asyncio.get_running_loop()
        timer = loop.call_later(self.request_timeout_s, self._timed_out, peer, client, out)

        def done(f: asyncio.Future[RaftResponse]) -> None:
            timer.cancel()
            if self._closed:
                return
            if self.cuts and self.cuts.deaf_to(out.destination) and not f.cancelled() and f.exception() is None:
                self._fail_later(out)  # the answer is lost on the way back
                return
            if f.cancelled() or f.exception() is not None:
                if peer.client is client:
                    peer.client = None
                self.on_failure(out.destination, out.correlation_id, api_key, ErrorCode.BROKER_NOT_AVAILABLE)
                return
            self.on_response(out.destination, out.correlation_id, f.result())

        fut.add_done_callback(done)

    def _timed_out(self, peer: _Peer, client: KafkaClient, out: OutboundRequest) -> None:
        """NetworkClient's request timeout: the connection goes, and every request on it fails."""
        log.info("request %s to voter %d timed out after %.0f ms; closing the connection",
                 type(out.message).__name__, peer.node_id, self.request_timeout_s * 1000)
        if peer.client is client:
            peer.client = None
        client.abort()

    def _fail_soon(self, out: OutboundRequest, error: int) -> None:
        api_key = type(out.message).api_key()
        assert api_key is not None

        def fail() -> None:
            if not self._closed:
                self.on_failure(out.destination, out.correlation_id, api_key, error)

        asyncio.get_running_loop().call_soon(fail)

    def _fail_later(self, out: OutboundRequest) -> None:
        """A request whose answer never comes: failed when the request timeout passes."""
        api_key = type(out.message).api_key()
        assert api_key is not None

        def fail() -> None:
            if not self._closed:
                self.on_failure(out.destination, out.correlation_id, api_key, ErrorCode.BROKER_NOT_AVAILABLE)

        asyncio.get_running_loop().call_later(self.request_timeout_s, fail)

    def _fail_queued(self, peer: _Peer) -> None:
        queued, peer.queued = peer.queued, []
        for out in queued:
            self._fail_soon(out, ErrorCode.BROKER_NOT_AVAILABLE)

    def _drop(self, peer: _Peer, why: str) -> None:
        log.debug("closing the connection to voter %d: %s", peer.node_id, why)
        if peer.client is not None:
            peer.client.abort()
            peer.client = None
        if peer.connecting is not None:
            peer.connecting.cancel()
            peer.connecting = None

    async def close(self) -> None:
        self._closed = True
        tasks = []
        for peer in self._peers.values():
            if peer.connecting is not None:
                peer.connecting.cancel()
                tasks.append(peer.connecting)
            if peer.client is not None:
                peer.client.abort()
        for t in tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - closing anyway
                pass
        self._peers.clear()
