"""The ``kraft`` source's options, parsed once and checked with one clear error each.

Spark hands options over as a case-insensitive map of strings; names follow Spark's Kafka
source where one exists (``startingOffsets`` for streams, ``maxOffsetsPerTrigger``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark_kraft.columns import CONTROL_TYPE_NAMES, CONTROL_TYPES, DECODE_MEMO_ENTRIES, METADATA_TYPES
from pyspark_kraft.layout import DEFAULT_SPLIT_BYTES

NAMES = ["path", "paths", "fromOffset", "toOffset", "recordTypes", "includeControl", "snapshot", "maxPartitionBytes",
         "verifyCrc", "rowsPerBatch", "startingOffsets", "maxOffsetsPerTrigger", "bootstrap.controller", "clusterId",
         "fetchMaxBytes", "requestTimeoutMs", "decodeMemo"]
CANONICAL = {n.lower(): n for n in NAMES}  # Spark hands option names over case-insensitively
KNOWN = set(CANONICAL)
RECORD_TYPE_NAMES = frozenset(METADATA_TYPES + CONTROL_TYPES) | frozenset(CONTROL_TYPE_NAMES.values())


class OptionError(ValueError):
    """An option with a value the source cannot use."""


@dataclass(frozen=True, slots=True)
class ReadOptions:
    path: str | None
    from_offset: int | None
    to_offset: int | None
    record_types: frozenset[str] | None
    include_control: bool
    snapshot: str
    max_partition_bytes: int
    verify_crc: bool
    rows_per_batch: int
    starting_offsets: str
    max_offsets_per_trigger: int | None
    bootstrap_controller: str | None
    cluster_id: str | None
    fetch_max_bytes: int
    request_timeout_ms: int
    decode_memo: int


def _int(opts: Mapping[str, str], key: str, default: int | None, minimum: int = 0) -> int | None:
    raw = opts.get(key)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option {CANONICAL[key]}={raw!r} is not an integer") from None
    if value < minimum:
        raise OptionError(f"option {CANONICAL[key]}={raw!r} must be at least {minimum}")
    return value


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise OptionError(f"option {CANONICAL[key]}={raw!r} is not true or false")


def parse(options: Mapping[str, str]) -> ReadOptions:
    """Validated options; OptionError names the first bad one."""
    opts = {str(k).lower(): v for k, v in options.items()}
    unknown = sorted(k for k in opts if k not in KNOWN)
    if unknown:
        raise OptionError(f"unknown option(s) {', '.join(unknown)} for the kraft source "
                          f"(known: fromOffset, toOffset, recordTypes, includeControl, snapshot, "
                          f"maxPartitionBytes, verifyCrc, startingOffsets, maxOffsetsPerTrigger, "
                          f"bootstrap.controller, clusterId)")
    types = None
    raw_types = opts.get("recordtypes")
    if raw_types is not None and str(raw_types).strip():
        names = [t.strip() for t in str(raw_types).split(",") if t.strip()]
        bad = [t for t in names if t not in RECORD_TYPE_NAMES]
        if bad:
            raise OptionError(f"option recordTypes: unknown record type(s) {', '.join(bad)} "
                              f"(e.g. RegisterBrokerRecord, PartitionChangeRecord, LeaderChange)")
        types = frozenset(names)
    from_offset = _int(opts, "fromoffset", None)
    to_offset = _int(opts, "tooffset", None)
    if from_offset is not None and to_offset is not None and to_offset < from_offset:
        raise OptionError(f"option toOffset={to_offset} is below fromOffset={from_offset}")
    starting = str(opts.get("startingoffsets", "earliest")).strip().lower()
    if starting not in ("earliest", "latest") and not starting.isdigit():
        raise OptionError(f"option startingOffsets={starting!r}: use earliest, latest or an offset")
    path = opts.get("path")
    if path is None and opts.get("paths"):
        path = str(opts["paths"]).strip("[]\"' ")
    return ReadOptions(
        path=path,
        from_offset=from_offset,
        to_offset=to_offset,
        record_types=types,
        include_control=_bool(opts, "includecontrol", True),
        snapshot=str(opts.get("snapshot", "none")),
        max_partition_bytes=_int(opts, "maxpartitionbytes", DEFAULT_SPLIT_BYTES, 1) or DEFAULT_SPLIT_BYTES,
        verify_crc=_bool(opts, "verifycrc", True),
        rows_per_batch=_int(opts, "rowsperbatch", 8192, 1) or 8192,
        starting_offsets=starting,
        max_offsets_per_trigger=_int(opts, "maxoffsetspertrigger", None, 1),
        bootstrap_controller=opts.get("bootstrap.controller"),
        cluster_id=opts.get("clusterid"),
        fetch_max_bytes=_int(opts, "fetchmaxbytes", 8 * 1024 * 1024, 1) or 8 * 1024 * 1024,
        request_timeout_ms=_int(opts, "requesttimeoutms", 30_000, 1) or 30_000,
        decode_memo=_int(opts, "decodememo", DECODE_MEMO_ENTRIES, 0) or 0,
    )
