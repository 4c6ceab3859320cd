"""Every normalisation the differential tests apply, each with its reason, in this one place.

The differential driver (``tests/kafka/differential.py``) compares every field of every
response and every field of every metadata record that Kafka 3.9 and kraftsim append. Only what
legitimately differs between two correct controllers is rewritten here, before comparing:

* values drawn at random per run,
* values that are log offsets (both logs hold the same records but may start the scenario at
  different offsets, see OFFSETS),
* what the timing of the machine decides (batch boundaries, timestamps, timer records).

``KNOWN_DIVERGENCES`` is different in kind: kraftsim does *not* behave like Kafka there yet.
Each entry hides one field from the general comparisons so that every other field keeps being
checked, and names the strict-xfail test that compares the field unmasked (so the fix turns that
test red until the entry is removed here).
"""

from __future__ import annotations

import bisect
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Normalisation:
    name: str
    reason: str


OFFSETS = Normalisation(
    "offsets are relative to the scenario's start",
    "Broker epochs (RegisterBrokerRecord.BrokerEpoch, BrokerRegistrationResponse.BrokerEpoch, the epochs "
    "in Fence/Unfence/BrokerRegistrationChange/UnregisterBroker records) and record offsets are log "
    "offsets. Before a scenario starts, each controller's log holds its own start-up records (and its "
    "RegisterControllerRecord, KIP-919, written a moment after activation), so each side's offsets are taken "
    "relative to that side's log end at the start of the "
    "scenario. Requests that carry offsets (CurrentMetadataOffset) are built the same way, per side.")

TOPIC_IDS = Normalisation(
    "topic ids by topic name",
    "A controller draws a random topic id (Uuid.randomUuid) for every new topic, so each id is replaced "
    "by 'topic-id:<name>' using the names that side's TopicRecords and CreateTopics responses give.")

UNKNOWN_UUIDS = Normalisation(
    "other random uuids by first appearance",
    "Uuids the scenario supplies (incarnations, log dirs; see scenario_uuid) are kept. Any other uuid that no "
    "topic explains (none is expected) is replaced by 'uuid#n', numbered in order of first appearance "
    "per side, so two runs compare by structure.")

SCENARIO_UUID_PREFIX = 0x5CE7A210


def scenario_uuid(n: int) -> uuid.UUID:
    """A fixed uuid made by a scenario: the same on both sides, so never rewritten."""
    return uuid.UUID(int=(SCENARIO_UUID_PREFIX << 96) | n)


BATCHES = Normalisation(
    "batch headers and boundaries are not compared",
    "Records are compared one by one (type, version, every field). How a side groups them into RecordBatches "
    "depends on append linger and timing (Kafka's accumulator may share a batch between events), and batch "
    "timestamps, CRCs and file positions depend on the clock.")

TIMER_RECORDS = Normalisation(
    "NoOpRecords are dropped, and offsets counted without them",
    "Both sides run with metadata.max.idle.interval.ms=0, so neither writes the periodic NoOpRecord; any that "
    "still appears was written by a timer at a moment the scenario does not decide. It is left out of the "
    "transcript, and offsets after it (record offsets and every field in OFFSET_FIELDS) are counted as if it "
    "were not there, so a timer record moves no other value.")

PLACEMENT = Normalisation(
    "automatic replica placement compared by its invariants",
    "For topics created without manual assignments, Kafka's StripedReplicaPlacer starts at a random broker "
    "and shuffles with an unseeded java.util.Random, so which brokers hold a partition, and in which order, "
    "differs run to run. In those topics' PartitionRecords each replica is compared as 'replica' (after "
    "checking the replicas are distinct), its directory as 'default dir' when it is the one log dir the "
    "scenario registered for that broker, the leader as 'first in ISR' when it is the ISR's first member "
    "(Kafka: isr.get(0), the first replica unless that broker is fenced or shutting down), and the ISR as 'all replicas' when it equals the replicas (else by its size); in their PartitionChangeRecords "
    "the ISR is compared by size and a leader as 'in ISR'. Scenarios that move leaders use manual "
    "assignments, which are compared exactly.")

HASH_ORDER = Normalisation(
    "orders Kafka takes from hash maps of random ids, and a shuffle",
    "Kafka shuffles DeleteTopics results on purpose (ControllerApis.deleteTopics: Collections.shuffle, so a "
    "result's position tells nothing), so they are compared sorted. It deletes the topics of one request by "
    "walking a HashSet of topic ids, and it finds the partitions a broker is in (or the leaderless ones) by "
    "walking an index keyed by topic id (BrokersToIsrs), and its leader balancer elects by walking a hash set of "
    "(topic id, partition) pairs; topic ids are random, so the order across topics is too. Within a step, each run of consecutive RemoveTopicRecords is compared sorted by topic, and each "
    "run of consecutive PartitionChangeRecords sorted by (topic, partition), offsets re-dealt in that order. "
    "ACLs too: DescribeAcls groups bindings in a HashMap keyed by resource pattern and a HashSet of entries "
    "(enums hash by identity, so the order changes per JVM), and DeleteAcls lists each filter's matches, and "
    "writes its RemoveAccessControlEntryRecords, in the order of a HashMap and a HashSet keyed by random ACL "
    "ids: DescribeAclsResponse.Resources and each resource's Acls, DeleteAclsFilterResult.MatchingAcls, and "
    "each run of consecutive RemoveAccessControlEntryRecords (by normalised id) are compared sorted.")

CAPPED_DELETION = Normalisation(
    "which topics a DeleteTopics over the record cap deletes",
    "ReplicationControlManager.deleteTopics writes one RemoveTopicRecord per topic into a list bounded at 10,000 "
    "records and answers each topic past it UNKNOWN_SERVER_ERROR; it walks the topics in the order of a HashMap "
    "keyed by their random ids, so which ones are deleted differs run to run. In a DeleteTopicsResponse with an "
    "UNKNOWN_SERVER_ERROR result, every result that is NONE or UNKNOWN_SERVER_ERROR has its name and topic id "
    "compared as 'a topic of the request' (their errors, messages and number are compared), and in the step's "
    "RemoveTopicRecords each topic id as 'a topic answered NONE' or, if the response did not answer it NONE, "
    "'a topic not answered NONE' (so each side's records must match its own answers).")

ACL_PUBLICATION_LAG = Normalisation(
    "DescribeAcls waits until the authorizer has loaded the log's ACLs",
    "A Kafka controller answers DescribeAcls from its StandardAuthorizer, which the MetadataLoader updates a "
    "moment after the ACL records commit, so a DescribeAcls right after a CreateAcls or DeleteAcls may not see "
    "it yet. Before a DescribeAcls step (when the side has an authorizer) the driver asks DescribeAcls for "
    "everything, with a deadline, until the bindings it gets are those the side's log holds (acls_settled); "
    "then the step's own request is sent and compared like any other. A token that expires within 100 ms is first waited for "
    "(by polling the clock) until it has expired, so that both sides judge it expired.")

PUBLICATION_LAG = Normalisation(
    "ApiVersions is asked again until it has seen the last feature change",
    "A Kafka controller answers ApiVersions from the metadata image its MetadataLoader publishes a moment "
    "after a FeatureLevelRecord commits, so right after an UpdateFeatures it may still report the old levels. "
    "An ApiVersions (v3+) step is re-sent, with a deadline, until its FinalizedFeaturesEpoch has reached the "
    "offset of the side's last FeatureLevelRecord (api_versions_settled); then it is compared like any other.")

DUMP_JSON = Normalisation(
    "kafka-dump-log's JSON leaves out tagged fields at their default",
    "Only for comparing kraftsim dump-log --json with DumpLogSegments --cluster-metadata-decoder: Kafka's "
    "generated JsonConverter writes a tagged field only when it differs from its default; kraftsim's dump-log "
    "writes every field of the record's version. The records are the same (kafka_json).")

TOOL_OUTPUT = Normalisation(
    "a JVM tool's log lines are not its output",
    "Only for comparing kraftsim features with kafka-features (tests/kafka/test_tools.py): lines the JVM's "
    "log4j prints ('[date] LEVEL ...', e.g. the admin client's warnings) are dropped from Kafka's tool's "
    "stdout and stderr before comparing (tool_lines); everything the tool itself prints is compared.")

SHELL_CATCH_UP = Normalisation(
    "the metadata shell is asked again until it has read the whole snapshot",
    "Only for the metadata shell on kraftsim's snapshot (tests/kafka/test_files.py::shell_tree): the 3.9 shell "
    "runs a one-shot command as soon as its loader has applied any offset (MetadataShell.waitUntilCaughtUp: "
    "lastAppliedOffset > 0), sometimes before the rest of the file is published. The command is repeated, with "
    "a deadline, until /image/provenance has reached the snapshot's last record; its ERROR lines about "
    "skipping the snapshot header and footer control records are printed for Kafka's own snapshots too.")

ENVELOPE_DATA = Normalisation(
    "an Envelope's ResponseData is compared decoded",
    "An EnvelopeResponse's ResponseData is the inner response, header and all, as bytes; it is decoded at the "
    "inner request's api key and version (normalise_envelope) so that every other normalisation applies inside "
    "it too. Bytes that do not decode are compared as hex.")

REQUEST_TEXT = Normalisation(
    "the text of a request in 'is not authorized' messages",
    "Kafka's AuthHelper.authorizeClusterOperation refuses with 'Request <request> is not authorized.' (4.1+: "
    "'Request <request> needs <OPERATION> permission.'), where "
    "<request> is the JVM's RequestChannel.Request.toString: processor number, connection id with ephemeral "
    "ports, a Session object's identity hash, buffer positions. Any ErrorMessage of the form 'Request "
    "Request(...) is not authorized.' is compared as 'Request <request> is not authorized.', and so for "
    "'needs ... permission.' (kraftsim names the listener, protocol, principal and api there).")

_REQUEST_TEXT = re.compile(r"^Request Request\(.*\) (is not authorized\.|needs [A-Z_]+ permission\.)$", re.DOTALL)

CONFIG_PUBLICATION_LAG = Normalisation(
    "DescribeConfigs waits until the node has applied the log's broker configs",
    "A Kafka controller answers DescribeConfigs from its own KafkaConfig, which its DynamicConfigPublisher "
    "updates a moment after the cluster-default or node BROKER ConfigRecords commit, so a DescribeConfigs right "
    "after an IncrementalAlterConfigs may not see them yet. Before a DescribeConfigs step the driver asks "
    "DescribeConfigs for BROKER '', BROKER <node id> and the step's topics, with a deadline, until they show "
    "the configs the side's log holds (of broker configs, as far as a node keeps them; configs_settled); then "
    "the step's own request is sent and compared like any other. Topic configs lag the same way (the metadata "
    "cache is published like the node's config).")

CONFIG_DOCUMENTATION = Normalisation(
    "config documentation is not compared",
    "DescribeConfigs v3+ with IncludeDocumentation: Kafka answers each config's documentation text from its "
    "ConfigDef; kraftsim carries no Kafka prose and answers null (docs/differences.md). Documentation is "
    "compared as null on both sides; everything else in each entry is compared.")

NODE_CONFIG = Normalisation(
    "a node's own addresses, paths and harness-only settings in its broker config",
    "DescribeConfigs of BROKER <node id>: the two controllers of a pair listen on different ports and keep "
    "their logs in different directories, so the values of listeners, controller.quorum.voters, log.dirs and "
    "metadata.log.dir (and of their synonyms) are compared as '<node>'. The harness gives each side settings "
    "the other does not have (kraftsim.http.listen for kraftsim's HTTP endpoint, kraftsim.release for the "
    "Kafka release it is; smaller JVM thread pools "
    "num.network.threads, num.io.threads, background.threads for Kafka): their entries are left out on both "
    "sides. Every other config, its value, source, synonyms, type and flags are compared, in order.")

LOGGERS = Normalisation(
    "BROKER_LOGGER lists the process's own loggers",
    "DescribeConfigs of BROKER_LOGGER lists every logger the process has: log4j's in a JVM, Python's in "
    "kraftsim, with different names. Its Configs are compared by their shape only (each entry's source, "
    "flags and that it names a logger with a level); errors are compared as is.")

NODE_VALUE_CONFIGS = frozenset({"listeners", "controller.quorum.voters", "log.dirs", "metadata.log.dir"})
ONE_SIDED_CONFIGS = frozenset({"kraftsim.http.listen", "kraftsim.release", "num.network.threads", "num.io.threads",
                               "background.threads"})


def normalise_describe_configs(out: dict[str, Any]) -> dict[str, Any]:
    """CONFIG_DOCUMENTATION, NODE_CONFIG and LOGGERS on a normalised DescribeConfigsResponse."""
    for result in out.get("results", []):
        configs = result.get("configs") or []
        if result.get("resource_type") == 8 and configs:
            result["configs"] = sorted({(c["config_source"], c["read_only"], c["is_sensitive"], bool(c["name"]),
                                         c["value"] in ("FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"))
                                        for c in configs})
            continue
        kept = []
        for c in configs:
            c["documentation"] = None
            if result.get("resource_type") == 4:
                if c["name"] in ONE_SIDED_CONFIGS:
                    continue
                if c["name"] in NODE_VALUE_CONFIGS and c["value"] is not None:
                    c["value"] = "<node>"
                for syn in c.get("synonyms") or []:
                    if syn["name"] in NODE_VALUE_CONFIGS and syn["value"] is not None:
                        syn["value"] = "<node>"
            kept.append(c)
        result["configs"] = kept
    return out

TOKENS = Normalisation(
    "delegation tokens by order of appearance, their times by what decided them",
    "A token id is a random Uuid (Uuid.randomUuid), so each is compared as 'token#n', n counting the tokens in "
    "the order that side first showed them; its HMAC, after checking it is the HMAC-SHA512 of the id under the "
    "pair's delegation.token.secret.key, as 'hmac(token#n)'. Token times come from each controller's clock. In "
    "a response or record about one token, its issue time is compared as 'issue', and any other time T (but -1 "
    "and 0) as 'issue+D' when T is D ms after the issue time, else as 'now+D' when T is D ms after some moment "
    "between sending the request and reading its answer; D must be 0, the pair's delegation.token.max.lifetime.ms "
    "or delegation.token.expiry.time.ms, or a period or lifetime a request of the scenario asked for. Any other time is "
    "compared as is (and so differs). A run of RemoveDelegationTokenRecords (one expiry sweep) is compared sorted "
    "by token: Kafka writes them in the order of a hash map keyed by the random ids.")

TOKEN_PUBLICATION_LAG = Normalisation(
    "a renewal or expiry waits until the controller's token cache has the log's tokens",
    "A Kafka controller finds a token by HMAC in its DelegationTokenCache, which the MetadataLoader updates a "
    "moment after the token's records commit, so a renewal right after a creation may find nothing yet. Before a "
    "forwarded RenewDelegationToken or ExpireDelegationToken step the driver sends, with a deadline, a renewal of "
    "the same HMAC by a principal that owns nothing (it writes nothing: DELEGATION_TOKEN_NOT_FOUND, _EXPIRED or "
    "_OWNER_MISMATCH) until its answer is the one the side's log implies (tokens_settled); then the step's "
    "own request is sent and compared like any other. A token that expires within 100 ms is first waited for "
    "(by polling the clock) until it has expired, so that both sides judge it expired.")

THROTTLE = Normalisation(
    "none for throttle_time_ms",
    "Compared as is: neither side throttles these APIs (listed so nobody adds a mask for it).")


@dataclass(frozen=True)
class KnownDivergence:
    name: str
    what: str
    test: str  # the strict-xfail test that compares it unmasked
    message: str  # the response class it touches
    attr: str  # the field it touches
    # (value, the message holding it, the side's view) -> the value compared in its place
    mask: Callable[[Any, Any, SideView], Any]


# None: kraftsim's controller serves every API version a Kafka controller of its release lists,
# so ApiVersions is compared whole (tests/kafka/test_release_44.py).
KNOWN_DIVERGENCES: tuple[KnownDivergence, ...] = ()

CONTROLLER_REGISTRATION = Normalisation(
    "RegisterControllerRecord is dropped like a timer record",
    "A controller registers itself (KIP-919: ControllerRegistration to the active controller, which writes a "
    "RegisterControllerRecord) once metadata.version is 3.7-IV0 or later: a moment after start-up, or after "
    "whatever step an UpdateFeatures crosses 3.7-IV0. Kafka's ControllerRegistrationManager does it from its "
    "own thread when the new image is published, so the record lands at a moment the scenario does not decide "
    "(kraftsim's lands in the step that crossed 3.7-IV0). It is left out like a NoOpRecord (offsets counted "
    "without it); tests/kafka/test_files.py::test_activation_records_with_controller_registration compares "
    "the log with it, record by record.")

RAFT = Normalisation(
    "Raft responses: offsets relative, records decoded, times and ports masked",
    "Fetch, FetchSnapshot and DescribeQuorum carry log offsets at every level (high watermark, log start and "
    "end offsets, diverging-epoch and snapshot end offsets): each is taken relative to the scenario's start "
    "as OFFSETS does. A Fetch's records are decoded and compared one by one from the fetch offset on (BATCHES: "
    "the batch holding the fetch offset may start earlier on one side), control records by type. Snapshot "
    "bytes depend on batch timestamps and are compared by length class only ('snapshot bytes'). "
    "Last-fetch and caught-up times are wall clock ('time'), and listener ports differ per side ('port'), in "
    "those responses and in the VotersRecord a kraft.version upgrade writes.")

LOG_FILES = Normalisation(
    "the log's files by kind and offset",
    "A Files step lists the segments (<base offset>.log) and snapshots (<end offset>-<epoch>.checkpoint) of "
    "__cluster_metadata-0, with a .deleted suffix for those marked for deletion, each offset relative as OFFSETS "
    "does. Kafka's offset and time indexes, producer-state snapshots (<offset>.snapshot) and state files are left "
    "out: kraftsim writes no index or producer state (a Kafka node rebuilds them), and the state files are compared "
    "elsewhere (tests/kafka/test_files.py).")

SNAPSHOT_LAG = Normalisation(
    "log files are compared once both sides have written their snapshots",
    "Kafka's SnapshotGenerator writes a snapshot on a thread of its own a moment after the commit that made it "
    "due, so before a scenario that compares log files after writing, each side's log is polled, with a "
    "deadline, until no snapshot is owed (the batches past its latest snapshot under the threshold), and then "
    "both sides' listings until they agree (files_settled); then they are compared like anything else.")

LOG_FILE = re.compile(r"^(\d{20})(\.log|-\d{10}\.checkpoint)(\.deleted)?$")


def log_file(name: str, view: SideView) -> str:
    """LOG_FILES: a segment or snapshot file name with its offset relative."""
    m = LOG_FILE.match(name)
    assert m is not None, name
    return f"{view.offset(int(m.group(1)))}{m.group(2)}{m.group(3) or ''}"


# Raft responses: fields holding offsets or times at any depth (RAFT).
RAFT_TOPS = frozenset({"FetchResponse", "FetchSnapshotResponse", "DescribeQuorumResponse"})
RAFT_OFFSET_ATTRS = frozenset({"high_watermark", "log_start_offset", "last_stable_offset", "log_end_offset",
                               "end_offset"})
RAFT_TIME_ATTRS = frozenset({"last_fetch_timestamp", "last_caught_up_timestamp"})


def raft_records(data: bytes, view: SideView, fetch_offset: int) -> list[Any]:
    """A Fetch's records as comparable entries, from ``fetch_offset`` on (RAFT)."""
    from kraftsim.metadata.batch import IncompleteBatchError, decode_control_record, read_batches
    from kraftsim.metadata.records import unframe

    out: list[Any] = []
    try:
        for batch in read_batches(data):
            for rec in batch.records():
                if rec.offset < fetch_offset:
                    continue
                if batch.is_control:
                    ctl = decode_control_record(rec)
                    out.append({"offset": view.offset(rec.offset), "control": type(ctl[1]).__name__ if ctl else "?"})
                    continue
                assert rec.value is not None
                msg, version = unframe(rec.value)
                name = type(msg).__name__
                if name in DROPPED_RECORDS:
                    continue
                out.append({"offset": view.offset(rec.offset), "type": name, "version": version,
                            "fields": normalise_record(msg, view)})
    except IncompleteBatchError:
        pass
    return out


# Records left out of transcripts, offsets renumbered around them.
DROPPED_RECORDS = {"NoOpRecord": TIMER_RECORDS, "RegisterControllerRecord": CONTROLLER_REGISTRATION}

ALL = (OFFSETS, TOPIC_IDS, UNKNOWN_UUIDS, PLACEMENT, BATCHES, TIMER_RECORDS, CONTROLLER_REGISTRATION, HASH_ORDER,
       CAPPED_DELETION, PUBLICATION_LAG, ACL_PUBLICATION_LAG, ENVELOPE_DATA, REQUEST_TEXT, DUMP_JSON, TOOL_OUTPUT,
       SHELL_CATCH_UP, THROTTLE, TOKENS, TOKEN_PUBLICATION_LAG, RAFT, LOG_FILES, SNAPSHOT_LAG, CONFIG_PUBLICATION_LAG,
       CONFIG_DOCUMENTATION, NODE_CONFIG, LOGGERS)

# Where offsets live: (message class name, field attribute).
OFFSET_FIELDS: frozenset[tuple[str, str]] = frozenset({
    ("BrokerRegistrationResponse", "broker_epoch"),
    ("RegisterBrokerRecord", "broker_epoch"),
    ("FenceBrokerRecord", "epoch"),
    ("UnfenceBrokerRecord", "epoch"),
    ("BrokerRegistrationChangeRecord", "broker_epoch"),
    ("UnregisterBrokerRecord", "broker_epoch"),
    ("ApiVersionsResponse", "finalized_features_epoch"),  # the offset the features last changed at
})


@dataclass
class SideView:
    """What one side's normalisation needs: its offset base, its topics, the uuids it has seen."""

    base: int
    topic_names: dict[uuid.UUID, str] = field(default_factory=dict)
    placed_topics: set[str] = field(default_factory=set)  # created without manual assignments
    unknown: dict[uuid.UUID, str] = field(default_factory=dict)
    dropped: list[int] = field(default_factory=list)  # offsets of DROPPED_RECORDS seen, ascending
    fetch_offset: int = 0  # the last Fetch's offset, from which its records are compared (RAFT)
    token_config: dict[str, str] = field(default_factory=dict)  # the side's delegation.token.* config (TOKENS)
    token_names: dict[str, str] = field(default_factory=dict)  # token id -> "token#n"
    token_issue: dict[str, int] = field(default_factory=dict)  # token id -> issue time
    window: tuple[int, int] = (0, 0)  # wall-clock ms just before the last request and just after its answer
    asked: set[int] = field(default_factory=set)  # the periods and lifetimes the scenario's token requests asked for
    capped_deletion: set[uuid.UUID] | None = None  # this step's topics answered NONE by a capped DeleteTopics
    release: str = "3.9"  # the Kafka release of the pair

    def token(self, token_id: str) -> str:
        if token_id not in self.token_names:
            self.token_names[token_id] = f"token#{len(self.token_names)}"
        return self.token_names[token_id]

    def token_id(self, name: str) -> str:
        """The id of the token the scenario calls ``name`` on this side (KeyError if none yet)."""
        return next(i for i, n in self.token_names.items() if n == name)

    def token_hmac(self, token_id: str) -> bytes:
        import hashlib
        import hmac

        secret = self.token_config.get("delegation.token.secret.key", "")
        return hmac.new(secret.encode(), token_id.encode(), hashlib.sha512).digest()

    def uuid(self, u: uuid.UUID) -> Any:
        if u.int >> 96 == SCENARIO_UUID_PREFIX or u.int in (0, 1):
            return str(u)
        name = self.topic_names.get(u)
        if name is not None:
            return f"topic-id:{name}"
        if u not in self.unknown:
            self.unknown[u] = f"uuid#{len(self.unknown)}"
        return self.unknown[u]

    def offset(self, value: int) -> Any:
        """``base+n``: n records (not counting dropped ones) after the scenario's first offset;
        negative n for an offset before it (a swapped controller's brokers)."""
        if value < 0:
            return value
        return f"base{self._index(value) - self._index(self.base):+d}"

    def _index(self, offset: int) -> int:
        return offset - bisect.bisect_left(self.dropped, offset)

    def drop(self, offset: int) -> None:
        bisect.insort(self.dropped, offset)


def normalise(obj: Any, view: SideView, cls_name: str | None = None, mask: bool = True) -> Any:
    """A plain, comparable value of a decoded message (or struct, list, scalar)."""
    from kraftsim.rpc.message import Struct

    if isinstance(obj, Struct):
        name = type(obj).__name__
        top = cls_name or name
        masked = {d.attr: d for d in KNOWN_DIVERGENCES if d.message == top} if mask and name == top else {}
        out: dict[str, Any] = {}
        for attr in obj.__slots__:
            if attr == "unknown_tagged_fields":
                v = getattr(obj, attr)
                if v:
                    out[attr] = repr(v)
                continue
            v = getattr(obj, attr)
            if attr in masked:
                out[attr] = normalise(masked[attr].mask(v, obj, view), view, top, mask)
            elif ((top, attr) == ("DeleteTopicsResponse", "responses") and name == top) \
                    or (top, attr) in HASH_ORDERED_ACL_FIELDS:  # HASH_ORDER
                out[attr] = sorted(normalise(v, view, top, mask), key=repr)
            elif (top, attr) in OFFSET_FIELDS and isinstance(v, int) and name == top:
                out[attr] = view.offset(v)
            elif top in RAFT_TOPS and isinstance(v, int) and attr in RAFT_OFFSET_ATTRS:
                out[attr] = view.offset(v) if v >= 0 else v
            elif top in RAFT_TOPS and isinstance(v, int) and attr in RAFT_TIME_ATTRS:
                out[attr] = "time" if v >= 0 else v
            elif top in RAFT_TOPS and attr == "port":
                out[attr] = "port"
            elif top == "FetchResponse" and attr == "records":
                out[attr] = raft_records(bytes(v or b""), view, view.fetch_offset)
            elif top == "FetchSnapshotResponse" and attr == "unaligned_records":
                out[attr] = "snapshot bytes" if v else v
            elif attr == "error_message" and isinstance(v, str) and (m := _REQUEST_TEXT.match(v)):  # REQUEST_TEXT
                out[attr] = f"Request <request> {m.group(1)}"
            else:
                out[attr] = normalise(v, view, top, mask)
        if name == top == "DescribeConfigsResponse":
            return normalise_describe_configs(out)
        if name == top == "DeleteTopicsResponse":
            return normalise_capped_deletion(obj, out, view)
        return out
    if isinstance(obj, list | tuple):
        return [normalise(v, view, cls_name, mask) for v in obj]
    if isinstance(obj, uuid.UUID):
        return view.uuid(obj)
    if isinstance(obj, bytes | bytearray | memoryview):
        return bytes(obj).hex()
    return obj


def normalise_envelope(req: Any, resp: Any, view: SideView, mask: bool = True) -> Any:
    """ENVELOPE_DATA: an EnvelopeResponse with its ResponseData decoded as the inner response."""
    from kraftsim.rpc import frames
    from kraftsim.rpc.codec_errors import CodecError

    out = normalise(resp, view, mask=mask)
    data = resp.response_data
    if data is None or len(req.request_data) < 4:
        return out
    api_key, version = int.from_bytes(req.request_data[0:2], "big"), int.from_bytes(req.request_data[2:4], "big")
    try:
        correlation_id, inner = frames.decode_response(bytes(data), api_key, version)
    except (CodecError, ValueError, KeyError):
        return out
    out["response_data"] = {"correlation_id": correlation_id, "inner": normalise_tokens(
        inner, normalise(inner, view, mask=mask), view, _inner_request(bytes(req.request_data)))}
    return out


def _inner_request(data: bytes) -> Any:
    from kraftsim.rpc import frames
    from kraftsim.rpc.codec_errors import CodecError

    try:
        return frames.decode_request(data)[1]
    except (CodecError, ValueError, KeyError):
        return None


_TOKEN_TIMES = {"CreateDelegationTokenResponse": ("issue_timestamp_ms", ("expiry_timestamp_ms", "max_timestamp_ms")),
                "RenewDelegationTokenResponse": (None, ("expiry_timestamp_ms",)),
                "ExpireDelegationTokenResponse": (None, ("expiry_timestamp_ms",)),
                "DelegationTokenRecord": ("issue_timestamp", ("max_timestamp", "expiration_timestamp"))}


def _long(v: int) -> int:
    """v as a Java long (the controllers add periods to times as longs, wrapping)."""
    return (v + (1 << 63)) % (1 << 64) - (1 << 63)


def normalise_tokens(msg: Any, out: Any, view: SideView, request: Any = None) -> Any:
    """TOKENS: token ids, HMACs and times of a token response or record, already normalised
    otherwise (``out``); ``request`` is the request a response answers."""
    name = type(msg).__name__
    if name == "RemoveDelegationTokenRecord" and isinstance(out, dict):
        out["token_id"] = view.token(msg.token_id)
    if name not in _TOKEN_TIMES or not isinstance(out, dict):
        return out
    token_id = getattr(msg, "token_id", None) or None
    if token_id is None and request is not None and getattr(request, "hmac", None):
        mac = bytes(request.hmac)
        token_id = next((t for t in view.token_names if view.token_hmac(t) == mac), None)
    if token_id is None:
        return out  # an error: no token, its times are -1 or 0 and compared as they are
    label = view.token(token_id)
    if "token_id" in out:
        out["token_id"] = label
    if "hmac" in out and msg.hmac:
        out["hmac"] = f"hmac({label})" if bytes(msg.hmac) == view.token_hmac(token_id) else bytes(msg.hmac).hex()
    issue_attr, others = _TOKEN_TIMES[name]
    if issue_attr is not None:
        view.token_issue.setdefault(token_id, getattr(msg, issue_attr))
    issue = view.token_issue.get(token_id)
    periods = {0, int(view.token_config.get("delegation.token.max.lifetime.ms", "604800000")),
               int(view.token_config.get("delegation.token.expiry.time.ms", "86400000"))}
    if request is not None:  # every period or lifetime the scenario has asked for so far
        view.asked |= {v for a in ("max_lifetime_ms", "renew_period_ms", "expiry_time_period_ms")
                       if isinstance(v := getattr(request, a, None), int) and v > 0}
    periods |= view.asked
    if issue_attr is not None and getattr(msg, issue_attr) == issue:
        out[issue_attr] = "issue"
    for attr in others:
        t = getattr(msg, attr)
        if t in (-1, 0):
            continue
        if issue is not None and _long(t - issue) in periods:
            out[attr] = f"issue+{_long(t - issue)}"
            continue
        lo, hi = view.window
        now = sorted(d for d in periods if lo <= _long(t - d) <= hi)
        if now:
            out[attr] = f"now+{now[0]}"
    return out


UNKNOWN_SERVER_ERROR = -1
A_TOPIC_OF_THE_REQUEST = "a topic of the request"


def normalise_capped_deletion(resp: Any, out: dict[str, Any], view: SideView) -> dict[str, Any]:
    """CAPPED_DELETION on a normalised DeleteTopicsResponse (``out``); notes the topics it
    answered NONE for the step's records (normalise_record)."""
    if not any(r.error_code == UNKNOWN_SERVER_ERROR for r in resp.responses):
        return out
    view.capped_deletion = {r.topic_id for r in resp.responses if r.error_code == 0}
    results = []
    for r in out["responses"]:
        if r["error_code"] in (0, UNKNOWN_SERVER_ERROR):
            r = {**r, "name": A_TOPIC_OF_THE_REQUEST, "topic_id": A_TOPIC_OF_THE_REQUEST}
        results.append(r)
    out["responses"] = sorted(results, key=repr)
    return out


def normalise_record(rec: Any, view: SideView) -> Any:
    """A metadata record's fields, normalised (PLACEMENT applies to records of placed topics)."""
    out = normalise_tokens(rec, normalise(rec, view), view)
    name = type(rec).__name__
    if name == "VotersRecord":  # RAFT: each side listens on a port of its own
        for voter in out["voters"]:
            for endpoint in voter["endpoints"]:
                endpoint["port"] = "port"
        return out
    if name == "RemoveTopicRecord" and view.capped_deletion is not None:  # CAPPED_DELETION
        out["topic_id"] = "a topic answered NONE" if rec.topic_id in view.capped_deletion \
            else "a topic not answered NONE"
        return out
    topic = view.topic_names.get(rec.topic_id) if hasattr(rec, "topic_id") else None
    if topic is None or topic not in view.placed_topics:
        return out
    if name == "PartitionRecord":
        replicas = list(rec.replicas)
        if len(set(replicas)) != len(replicas):
            return out  # not a valid placement: compare as is
        out["replicas"] = ["replica"] * len(replicas)
        if rec.directories:
            out["directories"] = ["default dir" if dirs == default_dir(r) else view.uuid(dirs)
                                  for r, dirs in zip(replicas, rec.directories, strict=False)]
        if rec.isr and rec.leader == rec.isr[0]:
            out["leader"] = "first in ISR"
        out["isr"] = "all replicas" if list(rec.isr) == replicas else f"{len(rec.isr)} of the replicas"
    elif name == "PartitionChangeRecord":
        if rec.isr is not None:
            out["isr"] = f"{len(rec.isr)} replicas"
        if rec.leader >= 0 and (rec.isr is None or rec.leader in rec.isr):
            out["leader"] = "in ISR"
    return out


# (response, field) at any depth: lists Kafka builds from hash maps and sets (HASH_ORDER).
HASH_ORDERED_ACL_FIELDS = frozenset({("DescribeAclsResponse", "resources"), ("DescribeAclsResponse", "acls"),
                                     ("DeleteAclsResponse", "matching_acls")})

_SORTED_RUNS: dict[str, Callable[[dict[str, Any]], tuple[str, int]]] = {
    "RemoveTopicRecord": lambda f: (repr(f["topic_id"]), 0),
    "PartitionChangeRecord": lambda f: (repr(f["topic_id"]), int(f["partition_id"])),
    "RemoveAccessControlEntryRecord": lambda f: (repr(f["id"]), 0),
    "RemoveDelegationTokenRecord": lambda f: (repr(f["token_id"]), 0),
}


def order_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """HASH_ORDER for the records one step appended (already normalised, in log order)."""
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(records):
        j = i
        key = _SORTED_RUNS.get(records[i]["type"])
        while j < len(records) and records[j]["type"] == records[i]["type"] and key is not None:
            j += 1
        if j - i > 1 and key is not None:
            by = key
            run = sorted(records[i:j], key=lambda r: by(r["fields"]))
            offsets = [r["offset"] for r in records[i:j]]
            out += [{**r, "offset": o} for r, o in zip(run, offsets, strict=True)]
            i = j
        else:
            out.append(records[i])
            i += 1
    return out


def default_dir(broker_id: int) -> uuid.UUID:
    """The one log dir the scenario's registrations give a broker (tests/kafka/differential.register)."""
    return scenario_uuid(10_000 + broker_id)


def api_versions_settled(resp: Any, version: int, last_feature_offset: int) -> bool:
    """PUBLICATION_LAG: whether an ApiVersions response reflects the last feature change."""
    return version < 3 or resp.error_code != 0 or resp.finalized_features_epoch >= last_feature_offset


def kafka_json(record_type: str, version: int, data: dict[str, Any]) -> dict[str, Any]:
    """DUMP_JSON: kraftsim dump-log's JSON of a record, without the tagged fields Kafka's
    JsonConverter would leave out (those at their default value)."""
    from kraftsim.metadata.records import by_name
    from kraftsim.rpc.values import camel

    def strip(spec: Any, doc: dict[str, Any]) -> dict[str, Any]:
        out = dict(doc)
        for f in spec.fields:
            key = camel(f.name)
            if key not in out:
                continue
            if version in f.tagged and out[key] == _json_default(f):
                del out[key]
            elif f.struct is not None and out[key] is not None:
                out[key] = ([strip(f.struct, e) for e in out[key]] if f.is_array else strip(f.struct, out[key]))
        return out

    return strip(by_name(record_type)._struct_spec, data)


def _json_default(f: Any) -> Any:
    v = f.default_value()
    if isinstance(v, uuid.UUID):
        from kraftsim.rpc.uuids import to_str
        return to_str(v)
    return list(v) if isinstance(v, tuple) else v


def mask_feature_epoch(text: str) -> str:
    """OFFSETS in kafka-features describe's output: its 'Epoch: N' is an offset, and the two logs'
    offsets differ by their bases (the epoch itself is compared, base-relative, in ApiVersions)."""
    return re.sub(r"Epoch: -?\d+", "Epoch: <known divergence>", text)


def tool_lines(text: str) -> list[str]:
    """TOOL_OUTPUT: a tool's own lines, without the JVM's log4j lines ("[date] LEVEL ...")."""
    return [ln for ln in text.splitlines() if ln.strip() and not re.match(r"^\[\d{4}-\d\d-\d\d ", ln)]


def describe() -> str:
    """The list above as text (shown by the differential tests' failure messages)."""
    lines = [f"- {n.name}: {n.reason}" for n in ALL]
    lines += [f"- known divergence {d.name}: {d.what} (unmasked in {d.test})" for d in KNOWN_DIVERGENCES]
    return "\n".join(lines)
