"""The differential driver: one scripted sequence, played through kraftsim's own protocol client
against a real Kafka 3.9 controller and against kraftsim, then compared.

A scenario is a list of steps. A :class:`Call` builds its request from the state of the side it
is played on (each side's broker epochs, topic ids and log offsets), sends it at a given version
and records the decoded response; an :class:`AwaitRecord` polls the side's log until a record
the controller writes by itself (session-timeout fencing) has appeared. After every step the
records that side appended are read from its log on disk with the project's reader. Both sides
play concurrently, each on its own connection; the two transcripts (every response field, every
appended record's type, version and fields) are compared after the normalisations of
``tests/kafka/normalise.py``, and nothing else.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import json
import os
import pprint
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraftsim.metadata.batch import BatchError, IncompleteBatchError, decode_control_record
from kraftsim.metadata.files import METADATA_TOPIC_DIR
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.records import type_name, unframe
from kraftsim.metadata.segments import iter_file_batches, parse_segment_name
from kraftsim.rpc import registry
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.codec_errors import DecodeError
from kraftsim.rpc.message import Message
from tests.kafka import normalise as norm
from tests.kafka.harness import Node

REG = registry.request_class(62)
HB = registry.request_class(63)
UNREG = registry.request_class(64)
UF = registry.request_class(57)
CT = registry.request_class(19)
DT = registry.request_class(20)
AV = registry.request_class(18)
ACQ = registry.request_class(49)
AUSC = registry.request_class(51)
DescribeAclsRequest = registry.request_class(29)
DescribeConfigsRequest: Any = registry.request_class(32)
APR: Any = registry.request_class(45)
AP: Any = registry.request_class(56)


# -- the log on disk ----------------------------------------------------------------------------

@dataclass(frozen=True)
class LoggedRecord:
    offset: int
    control: bool
    type: str
    version: int
    message: Message | None


def read_log(metadata_dir: Path, start: int = 0) -> list[LoggedRecord]:
    """Every record at or after ``start`` in the segments of ``__cluster_metadata-0``.

    A batch still being written at the end of the active segment is left for the next poll."""
    out: list[LoggedRecord] = []
    d = metadata_dir / METADATA_TOPIC_DIR
    segments = sorted((p for p in d.glob("*.log") if parse_segment_name(p.name) is not None),
                      key=lambda p: parse_segment_name(p.name) or 0)
    for seg in segments:
        try:
            for _, batch in iter_file_batches(seg):
                if batch.next_offset <= start:
                    continue
                for rec in batch.records():
                    if rec.offset < start:
                        continue
                    if batch.is_control:
                        ctl = decode_control_record(rec)
                        if ctl is None:
                            out.append(LoggedRecord(rec.offset, True, "Unknown", 0, None))
                        else:
                            out.append(LoggedRecord(rec.offset, True, type(ctl[1]).__name__, 0, ctl[1]))
                    else:
                        assert rec.value is not None, f"record without a value at {rec.offset}"
                        msg, version = unframe(rec.value)
                        api_key = msg.api_key()
                        out.append(LoggedRecord(rec.offset, False, type_name(api_key if api_key is not None else -1),
                                                version, msg))
        except IncompleteBatchError:
            break
        except BatchError as e:
            raise AssertionError(f"{seg}: {e}") from e
    return out


def log_end(metadata_dir: Path) -> int:
    """The next offset the log will assign (its log end offset)."""
    end = 0
    d = metadata_dir / METADATA_TOPIC_DIR
    for seg in d.glob("*.log"):
        base = parse_segment_name(seg.name)
        if base is None:
            continue
        end = max(end, base)
        try:
            for _, batch in iter_file_batches(seg, verify_crc=False):
                end = max(end, batch.next_offset)
        except IncompleteBatchError:
            pass
    return end


def log_files(metadata_dir: Path) -> list[str]:
    """The names of the segments and snapshots of ``__cluster_metadata-0``, those marked for
    deletion (``*.deleted``) included, in offset order."""
    d = metadata_dir / METADATA_TOPIC_DIR
    return sorted(p.name for p in d.iterdir() if norm.LOG_FILE.match(p.name))


async def files_settled(pair: Pair, timeout: float = 30) -> None:
    """normalise.SNAPSHOT_LAG: poll, with a deadline, until both sides' log files are the same
    (offsets relative to each side's log end now)."""
    deadline = time.monotonic() + timeout

    def listing(side: Side) -> list[str]:
        view = norm.SideView(log_end(side.node.metadata_dir))
        return [norm.log_file(n, view) for n in log_files(side.node.metadata_dir)]

    while listing(pair.kafka) != listing(pair.kraftsim) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)


# -- one side -----------------------------------------------------------------------------------

@dataclass
class Side:
    """One controller as a scenario sees it: a connection, its log, and what it has told us."""

    node: Node
    client: KafkaClient
    base: int = 0
    cursor: int = 0
    epochs: dict[int, int] = field(default_factory=dict)
    registered: set[int] = field(default_factory=set)  # broker ids whose registration is in the log
    last_feature_offset: int = -1  # of the last FeatureLevelRecord read
    adopted: bool = False  # epochs come from the log (adopt_log), not from this scenario
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    view: norm.SideView = field(default_factory=lambda: norm.SideView(0))

    @property
    def name(self) -> str:
        return self.node.kind

    @property
    def cluster_id(self) -> str:
        return self.node.cluster_id

    def begin(self) -> None:
        """Start a scenario here: offsets from now on are relative to the current log end.
        Epochs are forgotten unless :meth:`adopt_log` taught them for this scenario."""
        self.base = self.cursor = log_end(self.node.metadata_dir)
        if not self.adopted:
            self.epochs.clear()
        placed = self.view.placed_topics
        self.view = norm.SideView(self.base, placed_topics=placed, token_config={
            k: v for k, v in self.node.overrides.items() if k.startswith("delegation.token.")},
            release=self.node.release)
        for r in read_log(self.node.metadata_dir, 0):  # offsets before the start count without them too
            if r.type in norm.DROPPED_RECORDS:
                self.view.drop(r.offset)
        for name, tid in self.topic_ids.items():
            self.view.topic_names[tid] = name

    def adopt_log(self) -> None:
        """Learn broker epochs and topic ids from the whole log, for a controller started on a
        directory another controller wrote (the swap tests): what the scenario refers to."""
        names: dict[uuid.UUID, str] = {}
        for r in read_log(self.node.metadata_dir, 0):
            m: Any = r.message
            if r.type == "RegisterBrokerRecord":
                self.epochs[m.broker_id] = m.broker_epoch
                self.registered.add(m.broker_id)
            elif r.type == "UnregisterBrokerRecord":
                self.epochs.pop(m.broker_id, None)
                self.registered.discard(m.broker_id)
            elif r.type == "TopicRecord":
                self.topic_ids[m.name] = m.topic_id
                names[m.topic_id] = m.name
            elif r.type == "RemoveTopicRecord" and self.topic_ids.get(names.get(m.topic_id, "")) == m.topic_id:
                del self.topic_ids[names[m.topic_id]]
        self.adopted = True

    def last_offset(self) -> int:
        return log_end(self.node.metadata_dir) - 1

    def offset(self, relative: int) -> int:
        return self.base + relative

    def new_records(self) -> list[LoggedRecord]:
        recs = read_log(self.node.metadata_dir, self.cursor)
        if recs:
            self.cursor = recs[-1].offset + 1
        for r in recs:
            m: Any = r.message
            if r.type in norm.DROPPED_RECORDS:
                self.view.drop(r.offset)
            elif r.type == "TopicRecord":
                self.learn_topic(m.name, m.topic_id)
            elif r.type == "FeatureLevelRecord":
                self.last_feature_offset = r.offset
            elif r.type == "RemoveTopicRecord":
                name = self.view.topic_names.get(m.topic_id)  # a topic id keeps its name for normalising
                if name is not None and self.topic_ids.get(name) == m.topic_id:
                    del self.topic_ids[name]
            elif r.type == "RegisterBrokerRecord":
                self.registered.add(m.broker_id)
            elif r.type == "UnregisterBrokerRecord":
                self.registered.discard(m.broker_id)
        return recs

    async def cleanup(self) -> None:
        """Unregister the brokers and delete the topics this scenario left, so the next scenario
        on a shared pair starts from the same state (not compared: it is not part of a test)."""
        self.new_records()
        if self.topic_ids:
            await self.client.request(DT(topic_names=sorted(self.topic_ids), timeout_ms=30_000), 5)
        for b in sorted(self.registered):
            await self.client.request(UNREG(broker_id=b), 0)
        self.new_records()
        self.topic_ids.clear()
        self.epochs.clear()

    def new_records_peek(self) -> None:
        """Learn the last feature change from records not read yet, without consuming them."""
        for r in read_log(self.node.metadata_dir, self.cursor):
            if r.type == "FeatureLevelRecord":
                self.last_feature_offset = r.offset

    def learn_topic(self, name: str, topic_id: uuid.UUID) -> None:
        if topic_id != uuid.UUID(int=0):
            self.topic_ids[name] = topic_id
            self.view.topic_names[topic_id] = name

    def capture(self, req: Message, resp: Message) -> None:
        """Remember what later steps refer to: broker epochs and topic ids."""
        name = type(resp).__name__
        if name == "BrokerRegistrationResponse" and resp.error_code == 0:  # type: ignore[attr-defined]
            self.epochs[req.broker_id] = resp.broker_epoch  # type: ignore[attr-defined]
        elif name == "CreateTopicsResponse":
            for t in resp.topics:  # type: ignore[attr-defined]
                if t.error_code == 0:
                    self.learn_topic(t.name, t.topic_id)
        elif name == "UnregisterBrokerResponse" and resp.error_code == 0:  # type: ignore[attr-defined]
            self.epochs.pop(req.broker_id, None)  # type: ignore[attr-defined]


Builder = Callable[[Side], Message]


@dataclass(frozen=True)
class Call:
    label: str
    build: Builder
    version: int | None = None


@dataclass(frozen=True)
class AwaitRecord:
    """Wait (with a deadline) until the records the side appended since the previous step
    satisfy ``done`` (e.g. they fence every broker named)."""

    label: str
    done: Callable[[list[LoggedRecord]], bool]
    timeout: float = 30.0


@dataclass(frozen=True)
class Raw:
    """Bytes sent on a fresh connection; the response frame is recorded after its correlation id."""

    label: str
    frame: bytes


@dataclass(frozen=True)
class Files:
    """The segments and snapshots of the side's metadata log as they are now (normalise.LOG_FILES)."""

    label: str


@dataclass(frozen=True)
class AwaitFiles:
    """Wait (with a deadline) until the side's log files satisfy ``done`` (names as on disk),
    then record them as :class:`Files` does."""

    label: str
    done: Callable[[list[str]], bool]
    timeout: float = 30.0


Step = Call | AwaitRecord | Raw | Files | AwaitFiles


def records_view(records: list[LoggedRecord], view: norm.SideView) -> list[Any]:
    """The records as compared: dropped ones left out (their offsets were noted on reading)."""
    return norm.order_records([{"offset": view.offset(r.offset), "control": r.control, "type": r.type, "version": r.version,
             "fields": norm.normalise_record(r.message, view) if r.message is not None else None}
            for r in records if r.type not in norm.DROPPED_RECORDS])


async def play(side: Side, steps: Sequence[Step], mask: bool = True) -> list[dict[str, Any]]:
    transcript: list[dict[str, Any]] = []
    side.begin()
    for step in steps:
        entry: dict[str, Any] = {"step": step.label}
        side.view.capped_deletion = None  # normalise.CAPPED_DELETION: a step's own answers
        if isinstance(step, Call):
            if step.version is not None:
                entry["version"] = step.version
            try:
                req = step.build(side)
            except KeyError as e:  # e.g. the epoch of a broker whose registration failed here
                entry["response"] = f"<not built: no {e}>"
                records = side.new_records()
            else:
                try:
                    resp = await request(side, req, step.version)
                except (ConnectionError, TimeoutError, DecodeError) as e:  # the peer's doing: compared
                    entry["response"] = f"<{type(e).__name__}>"
                    records = side.new_records()
                else:
                    side.capture(req, resp)
                    # Records first: a dropped record before the response's offsets renumbers them.
                    records = side.new_records()
                    entry["response"] = norm.normalise_envelope(req, resp, side.view, mask) \
                        if type(resp).__name__ == "EnvelopeResponse" else norm.normalise(resp, side.view, mask=mask)
            entry["records"] = records_view(records, side.view)
        elif isinstance(step, AwaitRecord):
            deadline = time.monotonic() + step.timeout
            got: list[LoggedRecord] = []
            while True:
                got += side.new_records()
                if step.done(got):
                    break
                if time.monotonic() > deadline:
                    entry["timeout"] = f"no matching record within {step.timeout}s"
                    break
                await asyncio.sleep(0.05)
            entry["records"] = records_view(got, side.view)
        elif isinstance(step, Files | AwaitFiles):
            names = log_files(side.node.metadata_dir)
            if isinstance(step, AwaitFiles):
                deadline = time.monotonic() + step.timeout
                while not step.done(names):
                    if time.monotonic() > deadline:
                        entry["timeout"] = f"the files did not get there within {step.timeout}s"
                        break
                    await asyncio.sleep(0.1)
                    names = log_files(side.node.metadata_dir)
            entry["files"] = [norm.log_file(n, side.view) for n in names]
            entry["records"] = records_view(side.new_records(), side.view)
        else:
            entry["response"] = await raw_exchange(side.node.bootstrap, step.frame)
            entry["records"] = records_view(side.new_records(), side.view)
        transcript.append(entry)
    return transcript


async def request(side: Side, req: Message, version: int | None, timeout: float = 30) -> Any:
    """One request; ApiVersions is re-sent until it has seen the last feature change
    (normalise.PUBLICATION_LAG), and DescribeAcls waits for the ACLs in the log
    (normalise.ACL_PUBLICATION_LAG)."""
    if type(req).__name__ == "DescribeAclsRequest":
        await acls_settled(side, timeout)
    if type(req).__name__ == "DescribeConfigsRequest":
        await configs_settled(side, req, timeout)
    if type(req).__name__ == "EnvelopeRequest":
        await tokens_settled(side, req, timeout)
    before = time.time_ns() // 1_000_000
    resp = await side.client.request(req, version, timeout=60)
    side.view.window = (before, -(-time.time_ns() // 1_000_000))
    if type(req).__name__ != "ApiVersionsRequest":
        return resp
    v = 4 if version is None else version
    side.new_records_peek()
    deadline = time.monotonic() + timeout
    while not norm.api_versions_settled(resp, v, side.last_feature_offset) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        resp = await side.client.request(req, version, timeout=60)
    return resp


AclTuple = tuple[int, str, int, str, str, int, int]


def logged_acls(metadata_dir: Path) -> set[AclTuple]:
    """The bindings of the ACLs the log holds (created and not removed)."""
    live: dict[uuid.UUID, AclTuple] = {}
    for r in read_log(metadata_dir, 0):
        m: Any = r.message
        if r.type == "AccessControlEntryRecord":
            live[m.id] = (m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
                          m.permission_type)
        elif r.type == "RemoveAccessControlEntryRecord":
            live.pop(m.id, None)
    return set(live.values())


async def acls_settled(side: Side, timeout: float) -> None:
    """Ask DescribeAcls for everything until it answers the log's bindings (or an error: no
    authorizer), with a deadline."""
    everything = DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                     principal_filter=None, host_filter=None, operation=1, permission_type=1)
    deadline = time.monotonic() + timeout
    while True:
        resp = await side.client.request(everything, 3, timeout=60)
        if resp.error_code != 0:
            return
        got = {(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                a.permission_type) for r in resp.resources for a in r.acls}
        if got == logged_acls(side.node.metadata_dir) or time.monotonic() > deadline:
            return
        await asyncio.sleep(0.02)


def logged_configs(metadata_dir: Path) -> tuple[dict[tuple[int, str], dict[str, str]], set[str]]:
    """The configs the log holds by (resource type, name), and the topics it holds."""
    configs: dict[tuple[int, str], dict[str, str]] = {}
    topics: dict[uuid.UUID, str] = {}
    for r in read_log(metadata_dir, 0):
        m: Any = r.message
        if r.type == "ConfigRecord":
            layer = configs.setdefault((m.resource_type, m.resource_name), {})
            if m.value is None:
                layer.pop(m.name, None)
            else:
                layer[m.name] = m.value
        elif r.type == "TopicRecord":
            topics[m.topic_id] = m.name
        elif r.type == "RemoveTopicRecord" and m.topic_id in topics:
            configs.pop((2, topics.pop(m.topic_id)), None)
    return configs, set(topics.values())


async def configs_settled(side: Side, req: Any, timeout: float) -> None:
    """CONFIG_PUBLICATION_LAG: ask DescribeConfigs for the cluster default, this node and the
    topics ``req`` names until they show what the log holds (of broker configs, as far as the
    node keeps them), with a deadline."""
    from kraftsim.controller.configs.dynamic_broker_config import dynamic_layer

    node = str(side.node.node_id)
    logged, topics = logged_configs(side.node.metadata_dir)
    want_default = set(dynamic_layer(logged.get((4, ""), {}), per_broker=False, release=side.node.release).items())
    want_node = set(dynamic_layer(logged.get((4, node), {}), per_broker=True, release=side.node.release).items())
    named = sorted({r.resource_name for r in req.resources if r.resource_type == 2 and r.resource_name in topics})
    probe = DescribeConfigsRequest(include_synonyms=True, resources=[
        DescribeConfigsRequest.DescribeConfigsResource(resource_type=t, resource_name=n, configuration_keys=None)
        for t, n in [(4, ""), (4, node), *((2, n) for n in named)]])
    deadline = time.monotonic() + timeout
    while True:
        resp = await side.client.request(probe, 1, timeout=60)
        default, own, *described = resp.results
        if default.error_code or own.error_code:  # e.g. not authorized: nothing to wait for
            return
        sensitive = {c.name for r in resp.results for c in r.configs if c.is_sensitive}
        settled = ({(c.name, c.value) for c in default.configs if not c.is_sensitive}
                   == {kv for kv in want_default if kv[0] not in sensitive}
                   and {(s.name, s.value) for c in own.configs for s in c.synonyms if s.source == 2
                        and not c.is_sensitive} == {kv for kv in want_node if kv[0] not in sensitive})
        for result in described:
            # by name: a topic's value is answered parsed ("a, b" as "a,b")
            settled = settled and result.error_code in (0, 29) and (result.error_code != 0 or {
                c.name for c in result.configs if c.config_source == 1} == set(logged.get((2, result.resource_name), {})))
        if settled or time.monotonic() > deadline:
            return
        await asyncio.sleep(0.02)


def logged_token(metadata_dir: Path, mac: bytes, view: norm.SideView) -> tuple[int, int] | None:
    """(max, expiry) of the token with this HMAC as the log has it; None if it has none."""
    live: dict[str, tuple[int, int]] = {}
    for r in read_log(metadata_dir, 0):
        m: Any = r.message
        if r.type == "DelegationTokenRecord":
            live[m.token_id] = (m.max_timestamp, m.expiration_timestamp)
        elif r.type == "RemoveDelegationTokenRecord":
            live.pop(m.token_id, None)
    return next((t for i, t in live.items() if view.token_hmac(i) == mac), None)


TOKEN_PROBE_PRINCIPAL = "User:token-probe"  # owns and renews nothing


async def tokens_settled(side: Side, envelope: Any, timeout: float) -> None:
    """TOKEN_PUBLICATION_LAG: before a forwarded renewal or expiry, renew the same HMAC as a
    principal that owns nothing until the answer is the one the log implies, with a deadline."""
    from kraftsim.controller.envelope import serialize_principal
    from kraftsim.rpc import frames

    data = bytes(envelope.request_data)
    api_key = int.from_bytes(data[0:2], "big")
    if api_key not in (39, 40) or not side.view.token_config.get("delegation.token.secret.key"):
        return
    inner = norm._inner_request(data)
    if inner is None:
        return
    mac = bytes(inner.hmac)
    renew_cls = registry.request_class(39)
    probe = type(envelope)(request_data=frames.encode_request(renew_cls(hmac=mac, renew_period_ms=-1), 2, 1, "probe")[4:],
                           request_principal=serialize_principal(TOKEN_PROBE_PRINCIPAL),
                           client_host_address=b"\x7f\x00\x00\x01")
    deadline = time.monotonic() + timeout
    while True:
        token = logged_token(side.node.metadata_dir, mac, side.view)
        now = time.time_ns() // 1_000_000
        if token is not None and now <= min(token) <= now + 100 and time.monotonic() < deadline:
            await asyncio.sleep(0.005)  # it expires about now: poll until the clock has passed it
            continue
        want = 62 if token is None else 66 if min(token) < now else 63  # NOT_FOUND, EXPIRED, OWNER_MISMATCH
        resp = await side.client.request(probe, 0, timeout=60)
        got = frames.decode_response(bytes(resp.response_data), 39, 2)[1].error_code \
            if resp.error_code == 0 and resp.response_data is not None else None
        if got == want or got is None or time.monotonic() > deadline:
            return
        await asyncio.sleep(0.02)


async def raw_exchange(bootstrap: str, frame: bytes, timeout: float = 30) -> str:
    host, port = bootstrap.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(frame)
        await writer.drain()
        size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), timeout), "big", signed=True)
        body = await asyncio.wait_for(reader.readexactly(size), timeout)
        return body[4:].hex()  # after the correlation id
    except (asyncio.IncompleteReadError, ConnectionError) as e:
        return f"<closed: {type(e).__name__}>"
    finally:
        writer.close()


@dataclass
class Pair:
    """A real Kafka controller and a kraftsim controller formatted alike, with one client each."""

    kafka: Side
    kraftsim: Side

    @property
    def sides(self) -> tuple[Side, Side]:
        return self.kafka, self.kraftsim


async def run(pair: Pair, steps: Sequence[Step], mask: bool = True) -> tuple[list[Any], list[Any]]:
    """Both sides concurrently; if one side fails, the other is finished before re-raising, so the
    cleanup that follows never races a scenario still being played."""
    results = await asyncio.gather(play(pair.kafka, steps, mask), play(pair.kraftsim, steps, mask),
                                   return_exceptions=True)
    done: list[list[Any]] = []
    for r in results:
        if isinstance(r, BaseException):
            raise r
        done.append(r)
    return done[0], done[1]


def assert_same(kafka_t: list[Any], kraftsim_t: list[Any]) -> None:
    """Equal transcripts, or an error showing the first differing step as a diff."""
    if kafka_t == kraftsim_t:
        return
    out = os.environ.get("KRAFTSIM_DIFF_DIR")  # both transcripts in full, for a closer look
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        test = os.environ.get("PYTEST_CURRENT_TEST", "scenario").split(" ")[0]
        stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in test)
        for name, t in (("kafka", kafka_t), ("kraftsim", kraftsim_t)):
            (Path(out) / f"{stem}.{name}.json").write_text(dumps(t))
    differing = [i for i, (x, y) in enumerate(zip(kafka_t, kraftsim_t, strict=True)) if x != y]
    i = differing[0]
    left = pprint.pformat(kafka_t[i], width=110, sort_dicts=False).splitlines()
    right = pprint.pformat(kraftsim_t[i], width=110, sort_dicts=False).splitlines()
    diff = "\n".join(difflib.unified_diff(left, right, "kafka", "kraftsim", lineterm="", n=4))
    labels = ", ".join(repr(kafka_t[j]["step"]) for j in differing)
    raise AssertionError(f"kraftsim differs from Kafka at {len(differing)} step(s): {labels}\n"
                         f"first: step {i} {kafka_t[i]['step']!r}\n{diff}\n\nnormalisations applied:\n"
                         f"{norm.describe()}")


async def check(pair: Pair, steps: Sequence[Step]) -> Transcript:
    """Play ``steps`` on both sides and assert the transcripts are the same; returns Kafka's."""
    a, b = await run(pair, steps)
    assert_same(a, b)
    return Transcript(a)


class Transcript(list[dict[str, Any]]):
    """Kafka's side of a compared run, for asserting that a scenario took the path it meant to."""

    def __getitem__(self, label: Any) -> Any:  # type: ignore[override]
        if isinstance(label, str):
            hits = [e for e in self if e["step"] == label]
            assert len(hits) == 1, f"{len(hits)} steps labelled {label!r}"
            return hits[0]
        return super().__getitem__(label)

    def response(self, label: str) -> Any:
        return self[label]["response"]

    def error(self, label: str) -> int:
        r = self.response(label)
        if "error_code" in r:
            return int(r["error_code"])
        raise KeyError(f"{label}: no top-level error_code in {r}")

    def record_types(self, label: str) -> list[str]:
        return [r["type"] for r in self[label]["records"]]


def dumps(transcript: list[Any]) -> str:
    return json.dumps(transcript, indent=1, default=str)


# -- request builders ---------------------------------------------------------------------------

def scenario_uuid(n: int) -> uuid.UUID:
    """A fixed uuid the scenario supplies (incarnations, log dirs): kept as is by normalisation."""
    return norm.scenario_uuid(n)


MV_39 = 21


def listeners(broker_id: int) -> list[Any]:
    return [REG.Listener(name="PLAINTEXT", host="localhost", port=9092 + broker_id, security_protocol=0)]


def mv_feature(lo: int = 1, hi: int = MV_39) -> list[Any]:
    return [REG.Feature(name="metadata.version", min_supported_version=lo, max_supported_version=hi)]


def register(broker_id: int, *, incarnation: int | None = None, cluster_id: str | None = None,
             features: list[Any] | None = None, log_dirs: list[uuid.UUID] | None = None,
             rack: str | None = None, migrating: bool = False, previous_epoch: int = -1,
             listener_list: list[Any] | None = None) -> Builder:
    inc = scenario_uuid(broker_id * 100 + (incarnation or 0))
    dirs = [norm.default_dir(broker_id)] if log_dirs is None else log_dirs

    def build(side: Side) -> Message:
        return REG(broker_id=broker_id, cluster_id=side.cluster_id if cluster_id is None else cluster_id,
                   incarnation_id=inc, listeners=listener_list if listener_list is not None else listeners(broker_id),
                   features=mv_feature() if features is None else features, rack=rack,
                   is_migrating_zk_broker=migrating, log_dirs=dirs, previous_broker_epoch=previous_epoch)
    return build


def heartbeat(broker_id: int, *, epoch: int | None = None, epoch_delta: int = 0, offset: int | str = "last",
              want_fence: bool = False, want_shutdown: bool = False,
              offline_dirs: list[uuid.UUID] | None = None, cordoned_dirs: list[uuid.UUID] | None = None) -> Builder:
    """``offset``: "last" (the side's last offset: caught up), or an offset relative to the start.
    ``epoch``: by default the epoch this side gave the broker, -1 if it gave none.
    ``cordoned_dirs``: v2's CordonedLogDirs (None: null, a broker not caught up)."""
    def build(side: Side) -> Message:
        e = (side.epochs.get(broker_id, -1) if epoch is None else epoch) + epoch_delta
        off = side.last_offset() if offset == "last" else side.offset(int(offset))
        return HB(broker_id=broker_id, broker_epoch=e, current_metadata_offset=off, want_fence=want_fence,
                  want_shut_down=want_shutdown, offline_log_dirs=list(offline_dirs or []),
                  cordoned_log_dirs=cordoned_dirs)
    return build


def unregister(broker_id: int) -> Builder:
    return lambda side: UNREG(broker_id=broker_id)


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int = -1
    rf: int = -1
    assignments: dict[int, list[int]] | None = None
    configs: dict[str, str | None] | None = None


def create_topics(*topics: TopicSpec, validate_only: bool = False, timeout_ms: int = 30_000) -> Builder:
    def build(side: Side) -> Message:
        ts = []
        for t in topics:
            if not t.assignments:
                side.view.placed_topics.add(t.name)
            ts.append(CT.CreatableTopic(
                name=t.name, num_partitions=t.partitions, replication_factor=t.rf,
                assignments=[CT.CreatableReplicaAssignment(partition_index=p, broker_ids=list(b))
                             for p, b in (t.assignments or {}).items()],
                configs=[CT.CreatableTopicConfig(name=k, value=v) for k, v in (t.configs or {}).items()]))
        return CT(topics=ts, timeout_ms=timeout_ms, validate_only=validate_only)
    return build


def delete_topics(*names: str, version: int = 6, by_id: bool = False, unknown_ids: Sequence[uuid.UUID] = (),
                  timeout_ms: int = 30_000) -> Builder:
    """By name (every version), or by this side's topic id (v6); ``unknown_ids`` adds ids nobody has.
    ``version`` picks the request layout: TopicNames before v6, Topics from v6."""
    def build(side: Side) -> Message:
        if version < 6:
            assert not by_id and not unknown_ids, "topic ids need v6"
            return DT(topic_names=list(names), timeout_ms=timeout_ms)
        states = []
        for n in names:
            if by_id:
                states.append(DT.DeleteTopicState(name=None, topic_id=side.topic_ids.get(n, uuid.UUID(int=0))))
            else:
                states.append(DT.DeleteTopicState(name=n, topic_id=uuid.UUID(int=0)))
        states += [DT.DeleteTopicState(name=None, topic_id=u) for u in unknown_ids]
        return DT(topics=states, timeout_ms=timeout_ms)
    return build


def update_features(*updates: tuple[str, int, int], validate_only: bool = False,
                    allow_downgrade: bool = False, timeout_ms: int = 30_000) -> Builder:
    """``updates``: (feature, level, upgrade type 1 upgrade / 2 safe / 3 unsafe downgrade)."""
    def build(side: Side) -> Message:
        return UF(timeout_ms=timeout_ms, validate_only=validate_only, feature_updates=[
            UF.FeatureUpdateKey(feature=f, max_version_level=lvl, upgrade_type=ut, allow_downgrade=allow_downgrade)
            for f, lvl, ut in updates])
    return build


def api_versions(software: str = "kraftsim-tests", version: str = "1.0") -> Builder:
    return lambda side: AV(client_software_name=software, client_software_version=version)


QuotaOp = tuple[str, float | None]  # (key, value); a None value removes the key
QuotaEntity = list[tuple[str, str | None]]  # (entity type, name); a None name is the default entity


def alter_client_quotas(*entries: tuple[QuotaEntity, list[QuotaOp]], validate_only: bool = False) -> Builder:
    def build(side: Side) -> Message:
        return ACQ(validate_only=validate_only, entries=[
            ACQ.EntryData(entity=[ACQ.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                          ops=[ACQ.OpData(key=k, value=0.0 if v is None else v, remove=v is None) for k, v in ops])
            for entity, ops in entries])
    return build


def user_entity(name: str | None) -> QuotaEntity:
    return [("user", name)]


def scram_upsertion(name: str, mechanism: int = 1, iterations: int = 4096, salt: bytes = b"fixed-salt",
                    password: str = "secret", salted_password: bytes | None = None) -> Any:
    """The client's half of SCRAM (KIP-554): the salt is the scenario's, so both sides store the
    same keys. ``salted_password`` overrides the PBKDF2 of ``password``."""
    if salted_password is None:
        digest = "sha512" if mechanism == 2 else "sha256"
        salted_password = hashlib.pbkdf2_hmac(digest, password.encode(), salt, min(max(iterations, 1), 16384))
    return AUSC.ScramCredentialUpsertion(name=name, mechanism=mechanism, iterations=iterations, salt=salt,
                                         salted_password=salted_password)


def scram_deletion(name: str, mechanism: int = 1) -> Any:
    return AUSC.ScramCredentialDeletion(name=name, mechanism=mechanism)


def alter_scram(*, deletions: Sequence[Any] = (), upsertions: Sequence[Any] = ()) -> Builder:
    return lambda side: AUSC(deletions=list(deletions), upsertions=list(upsertions))


Targets = dict[str, dict[int, list[int] | None]]


def reassign(targets: Targets) -> Builder:
    """AlterPartitionReassignments: each partition's target replicas, or None to cancel."""
    def build(side: Side) -> Any:
        return APR(timeout_ms=30_000, topics=[APR.ReassignableTopic(name=t, partitions=[
            APR.ReassignablePartition(partition_index=p, replicas=r) for p, r in parts.items()])
            for t, parts in targets.items()])
    return build


def leader_adds_to_isr(topic: str, pid: int, broker: int) -> Builder:
    """The partition's leader asks to add ``broker`` to the ISR, with the epochs this side's
    own log gives (replayed into an image), as a real leader would once the replica caught up."""
    def build(side: Side) -> Any:
        image = MetadataImage()
        for r in read_log(side.node.metadata_dir, 0):
            if not r.control:
                image.replay(r.message, r.offset)
        t = image.topics.by_name[topic]
        p = t.partitions[pid]
        isr = [*p.isr, broker]
        return AP(broker_id=p.leader, broker_epoch=side.epochs[p.leader], topics=[AP.TopicData(
            topic_id=t.id, partitions=[AP.PartitionData(
                partition_index=pid, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                leader_recovery_state=0,
                new_isr_with_epochs=[AP.BrokerState(broker_id=b, broker_epoch=side.epochs[b]) for b in isr])])])
    return build


def leader_sets_isr(topic: str, pid: int, change: Callable[[tuple[int, ...]], list[int]]) -> Builder:
    """The partition's leader asks for the ISR ``change`` makes of the current one, with the
    epochs this side's own log gives (replayed into an image of the side's release)."""
    def build(side: Side) -> Any:
        from kraftsim.metadata import versions

        release = versions.release(side.node.release)
        image = MetadataImage(release.supported_features(True), release)
        for r in read_log(side.node.metadata_dir, 0):
            if not r.control:
                image.replay(r.message, r.offset)
        t = image.topics.by_name[topic]
        p = t.partitions[pid]
        return AP(broker_id=p.leader, broker_epoch=side.epochs[p.leader], topics=[AP.TopicData(
            topic_id=t.id, partitions=[AP.PartitionData(
                partition_index=pid, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                leader_recovery_state=0,
                new_isr_with_epochs=[AP.BrokerState(broker_id=b, broker_epoch=side.epochs[b])
                                     for b in change(p.isr)])])])
    return build


def fenced(*broker_ids: int) -> Callable[[list[LoggedRecord]], bool]:
    """Records that fence every broker named (in either form Kafka writes)."""
    def done(records: list[LoggedRecord]) -> bool:
        seen = set()
        for r in records:
            m: Any = r.message
            if r.type == "FenceBrokerRecord":
                seen.add(m.id)
            elif r.type == "BrokerRegistrationChangeRecord" and m.fenced == 1:
                seen.add(m.broker_id)
        return seen >= set(broker_ids)
    return done
