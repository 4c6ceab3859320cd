"""The active controller's connections to the ZooKeeper-mode brokers during a migration (Kafka's
ControllerChannelManager, as the KRaft controller's MigrationPropagator uses it).

One connection and one task per broker, to the endpoint of the controller's inter-broker listener
in the broker's registration. Requests go in the order given, one in flight at a time (Kafka's
channel allows one), with the controller's node id as the client id and no ApiVersions first
(the versions are chosen from metadata.version, as Kafka's channel does without discovery). A
request that cannot be sent or gets no answer is sent again on a new connection after 100 ms, as
Kafka's RequestSendThread retries until the broker is removed. The response's errors are logged
and nothing else happens, as in Kafka's migration batch.

Adding to a broker's queue never waits: the queue is bounded, and a request that would overflow
it is dropped and counted (Kafka's queue is unbounded; a broker that never answers should not
grow the controller's memory without end). A broker fenced, unregistered or given a new endpoint
loses its channel and whatever was queued for it, as Kafka's channel manager removes it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from typing import Any, Final

from kraftsim.migration.propagator import ControlRequest
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.client import ConnectionClosed, KafkaClient
from kraftsim.rpc.codec_errors import DecodeError
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.frames import api_codec
from kraftsim.rpc.message import Message

log = logging.getLogger("kraftsim.migration.channel")

RETRY_BACKOFF_S: Final = 0.1  # RequestSendThread's pause between attempts
MAX_QUEUED: Final = 10_000  # per broker
Address = tuple[str, int]


def _error_name(code: int) -> str:
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)


def response_errors(api_key: int, response: Any) -> list[str]:
    """What Kafka's migration batch logs about a response (nothing when all is well)."""
    name = ApiKey(api_key).name
    out = []
    if response.error_code != ErrorCode.NONE:
        out.append(f"Received error {_error_name(response.error_code)} in {name} response")
    if api_key == ApiKey.LEADER_AND_ISR and response.error_code == ErrorCode.NONE:
        parts = [e for t in response.topics for e in t.partition_errors] + list(response.partition_errors)
        offline = [e.partition_index for e in parts if e.error_code == ErrorCode.KAFKA_STORAGE_ERROR]
        if offline:
            out.append(f"Found {len(offline)} partitions offline")
    if api_key == ApiKey.STOP_REPLICA:
        out += [f"Received error {_error_name(e.error_code)} in StopReplica request for partition "
                f"{e.topic_name}-{e.partition_index}" for e in response.partition_errors if e.error_code]
    return out


class BrokerChannel:
    def __init__(self, broker_id: int, address: Address, client_id: str, request_timeout_s: float) -> None:
        self.broker_id = broker_id
        self.address = address
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.queue: deque[ControlRequest] = deque()
        self.sent = 0  # requests answered
        self.errors = 0  # responses with an error
        self.dropped = 0
        self.retries = 0  # attempts that failed (no connection, or no answer) and were made again
        self._corr = itertools.count()
        self._client: KafkaClient | None = None
        self._wake = asyncio.Event()
        self._closed = False
        self._task = asyncio.create_task(self._run(), name=f"migration-channel-{broker_id}")

    def put(self, req: ControlRequest) -> None:
        if len(self.queue) >= MAX_QUEUED:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.error("Dropping %s for broker %d: %d requests queued already (%d dropped)",
                          ApiKey(req.api_key).name, self.broker_id, len(self.queue), self.dropped)
            return
        self.queue.append(req)
        self._wake.set()

    async def _run(self) -> None:
        failures = 0
        while not self._closed:
            if not self.queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            req = self.queue[0]
            try:
                resp = await self._send(req)
            except (OSError, TimeoutError, ConnectionClosed, DecodeError) as e:
                if failures == 0:
                    log.warning("Controller fails to send %s to broker %d at %s:%d: %s. Reconnecting.",
                                ApiKey(req.api_key).name, self.broker_id, *self.address, e)
                failures += 1
                self.retries += 1
                self._drop_connection()
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            if failures:
                log.info("Controller connected to broker %d at %s:%d for sending state change requests",
                         self.broker_id, *self.address)
            failures = 0
            if self.queue and self.queue[0] is req:
                self.queue.popleft()
            self.sent += 1
            problems = response_errors(req.api_key, resp)
            if problems:
                self.errors += 1
                for p in problems:
                    log.error("%s from broker %d", p, self.broker_id)

    async def _send(self, req: ControlRequest) -> Message:
        client = self._client
        if client is None or client.closed:
            client = self._client = await KafkaClient.connect(*self.address, client_id=self.client_id,
                                                              timeout=self.request_timeout_s)
        codec = api_codec(req.api_key, req.version)
        corr = next(self._corr)
        # Encoded in a worker thread: a full sync's UpdateMetadata is megabytes at 100,000 partitions.
        frame = await asyncio.to_thread(codec.encode_request, req.body, corr, self.client_id)
        if client.closed:
            raise ConnectionClosed("connection closed while the request was encoded")
        return await asyncio.wait_for(client.send_frame(frame, codec, corr), self.request_timeout_s)

    def _drop_connection(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.abort()

    async def close(self) -> None:
        """Cancelled until it ends: Python 3.11's wait_for can swallow a cancellation that
        arrives as the connection completes, and the loop would then go on retrying."""
        self._closed = True
        while not self._task.done():
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=0.1)
        self.queue.clear()
        self._drop_connection()


class BrokerChannels:
    """The channels of the brokers the propagator's requests may go to."""

    def __init__(self, controller_id: int, request_timeout_s: float = 30.0) -> None:
        self.client_id = str(controller_id)  # Kafka's controller channel: the node id
        self.request_timeout_s = request_timeout_s
        self.channels: dict[int, BrokerChannel] = {}

    async def update(self, brokers: dict[int, Address]) -> None:
        """Kafka's publishMetadata: a channel for each broker given, and none for the others."""
        for b in list(self.channels):
            ch = self.channels[b]
            if brokers.get(b) != ch.address:
                del self.channels[b]
                log.info("Removing broker %d from the controller's channels", b)
                await ch.close()
        for b, addr in brokers.items():
            if b not in self.channels:
                log.info("Adding broker %d at %s:%d to the controller's channels", b, *addr)
                self.channels[b] = BrokerChannel(b, addr, self.client_id, self.request_timeout_s)

    def send(self, requests: list[ControlRequest]) -> None:
        for req in requests:
            ch = self.channels.get(req.broker_id)
            if ch is None:
                log.warning("Not sending request %s to broker %d, since it is offline.", ApiKey(req.api_key).name,
                            req.broker_id)
                continue
            ch.put(req)

    def stats(self) -> dict[int, dict[str, int]]:
        return {b: {"queued": len(c.queue), "sent": c.sent, "errors": c.errors, "dropped": c.dropped,
                    "retries": c.retries} for b, c in self.channels.items()}

    async def close(self) -> None:
        channels, self.channels = self.channels, {}
        for ch in channels.values():
            await ch.close()
