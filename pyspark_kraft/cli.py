"""``kraftsim spark image`` and ``kraftsim spark report``: the Spark tools of the console script.

Imported by ``kraftsim``'s parser without importing pyspark, so every other sub-command works
without the ``spark`` extra; these two say in one line when it is missing. Bad input (a missing
directory, an offset outside the log) is refused before a JVM is started.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kraftsim.cli.common import CommandError

RESOURCE_TYPES = {1: "ANY", 2: "TOPIC", 3: "GROUP", 4: "CLUSTER", 5: "TRANSACTIONAL_ID", 6: "DELEGATION_TOKEN",
                  7: "USER"}
PATTERN_TYPES = {1: "ANY", 2: "MATCH", 3: "LITERAL", 4: "PREFIXED"}
OPERATIONS = {1: "ANY", 2: "ALL", 3: "READ", 4: "WRITE", 5: "CREATE", 6: "DELETE", 7: "ALTER", 8: "DESCRIBE",
              9: "CLUSTER_ACTION", 10: "DESCRIBE_CONFIGS", 11: "ALTER_CONFIGS", 12: "IDEMPOTENT_WRITE",
              13: "CREATE_TOKENS", 14: "DESCRIBE_TOKENS"}
PERMISSIONS = {1: "ANY", 2: "DENY", 3: "ALLOW"}
SECURITY_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}


def register(sub: Any) -> None:
    """Add ``spark image`` and ``spark report`` to the ``kraftsim`` parser."""
    sp = sub.add_parser("spark", help="the metadata log in Spark: the image at an offset, a report")
    ssub = sp.add_subparsers(dest="spark_command", required=True, parser_class=type(sp))
    im = ssub.add_parser("image", help="print the metadata image at an offset, computed in Spark")
    im.add_argument("dir", metavar="DIR", help="a metadata.log.dir or its __cluster_metadata-0")
    im.add_argument("--at", type=int, default=None, metavar="OFFSET",
                    help="the offset (inclusive); default: the last offset in the log")
    im.add_argument("--master", default=None, help="Spark master (default local[*])")
    im.add_argument("--json", action="store_true", help="print the image as one JSON document")
    im.add_argument("--snapshot", default="auto",
                    help="start from a snapshot: auto (when the log no longer starts at 0), none, latest, "
                         "or a .checkpoint name")
    im.set_defaults(func=_image)
    rp = ssub.add_parser("report", help="Parquet tables and an HTML report with plots of the log's history")
    rp.add_argument("dir", metavar="DIR", help="a metadata.log.dir or its __cluster_metadata-0")
    rp.add_argument("--out", required=True, metavar="REPORT_DIR", help="where to write the report")
    rp.add_argument("--master", default=None, help="Spark master (default local[*])")
    rp.set_defaults(func=_report)


def _fail(message: str) -> Any:
    return CommandError(message)


def _need_spark(tool: str) -> None:
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as e:
        raise _fail(f"kraftsim spark {tool}: needs the spark extra ({e.name} is missing): "
                    f"pip install 'kraftsim[spark]'") from None


def _check_dir(tool: str, directory: str) -> Any:
    from pyspark_kraft import layout

    try:
        return layout.partition_dir(directory)
    except layout.LayoutError as e:
        raise _fail(f"kraftsim spark {tool}: {e}") from None


def _quiet(spark: Any) -> None:
    spark.sparkContext.setLogLevel("ERROR")


def _image(args: argparse.Namespace) -> int:
    _need_spark("image")
    from pyspark_kraft import layout

    part = _check_dir("image", args.dir)
    end = layout.log_end_offset(part)
    start = layout.log_start_offset(part)
    at = end - 1 if args.at is None else args.at
    if at < 0 or (end > 0 and at >= end) or end == 0:
        raise _fail(f"kraftsim spark image: offset {at} is not in the log (offsets {start}..{end - 1})"
                    if end > 0 else f"kraftsim spark image: {args.dir}: the log is empty")
    from pyspark_kraft.image import ImageError, image_at
    from pyspark_kraft.session import spark_session

    spark = spark_session(args.master, "kraftsim spark image", progress=sys.stderr.isatty())
    _quiet(spark)
    try:
        img = image_at(spark, args.dir, at, snapshot=args.snapshot)
    except (ImageError, layout.LayoutError, ValueError) as e:
        raise _fail(f"kraftsim spark image: {e}") from None
    finally:
        spark.stop()
    if args.json:
        print(json.dumps(img, sort_keys=True))
    else:
        print(render_image(img))
    return 0


def render_image(img: dict[str, Any]) -> str:
    """The image as text, in the shapes Kafka's tools print (kafka-topics --describe, ...)."""
    out: list[str] = []
    features = img["features"]
    mv = features.get("metadata.version")
    if mv is not None:
        from kraftsim.metadata import versions

        names = {v.level: v.name for line in versions.release_lines() for v in versions.release(line).versions}
        mv_text = f"{mv} ({names[mv]})" if mv in names else str(mv)
    else:
        mv_text = "unset"
    out.append(f"Metadata image at offset {img['offset']}: metadata.version {mv_text}, "
               f"ZooKeeper migration state {img['migration']}")
    out.append("Features: " + (" ".join(f"{k}={v}" for k, v in sorted(features.items())) or "none"))
    brokers = img["brokers"]
    out.append(f"Brokers ({len(brokers)}):")
    for bid in sorted(brokers, key=int):
        b = brokers[bid]
        state = "fenced" if b["fenced"] else "unfenced"
        if b["inControlledShutdown"]:
            state += ", in controlled shutdown"
        eps = ",".join(f"{n}://{h}:{p}" for n, (h, p, _sp) in sorted(b["listeners"].items()))
        out.append(f"\tBroker: {bid}\tEpoch: {b['epoch']}\tState: {state}\tRack: {b['rack']}\tEndpoints: {eps}")
    if img["controllers"]:
        out.append(f"Controllers ({len(img['controllers'])}):")
        for cid in sorted(img["controllers"], key=int):
            c = img["controllers"][cid]
            eps = ",".join(f"{n}://{h}:{p}" for n, (h, p, _sp) in sorted(c["listeners"].items()))
            out.append(f"\tController: {cid}\tEndpoints: {eps}\tZkMigrationReady: {str(c['zkMigrationReady']).lower()}")
    topics = img["topics"]
    nparts = sum(len(t["partitions"]) for t in topics.values())
    offline = sum(1 for t in topics.values() for p in t["partitions"].values() if p["leader"] == -1)
    out.append(f"Topics ({len(topics)}, {nparts} partitions, {offline} without a leader):")
    for name in sorted(topics):
        t = topics[name]
        parts = t["partitions"]
        rf = len(next(iter(parts.values()))["replicas"]) if parts else 0
        cfg = img["configs"].get(f"topic:{name}", {})
        cfg_text = ",".join(f"{k}={v}" for k, v in sorted(cfg.items()))
        out.append(f"Topic: {name}\tTopicId: {t['id']}\tPartitionCount: {len(parts)}\tReplicationFactor: {rf}"
                   f"\tConfigs: {cfg_text}")
        for pid in sorted(parts, key=int):
            p = parts[pid]
            line = (f"\tTopic: {name}\tPartition: {pid}\tLeader: {p['leader'] if p['leader'] != -1 else 'none'}"
                    f"\tLeaderEpoch: {p['leaderEpoch']}\tReplicas: {','.join(map(str, p['replicas']))}"
                    f"\tIsr: {','.join(map(str, p['isr']))}")
            if p["eligibleLeaderReplicas"]:
                line += f"\tElr: {','.join(map(str, p['eligibleLeaderReplicas']))}"
            out.append(line)
    other = {k: v for k, v in img["configs"].items() if not k.startswith("topic:")}
    out.append(f"Configs ({len(other)} non-topic resources):")
    for key in sorted(other):
        out.append(f"\t{key or 'cluster'}\t" + ",".join(f"{k}={v}" for k, v in sorted(other[key].items())))
    acls = img["acls"]
    out.append(f"ACLs ({len(acls)}):")
    for aid in sorted(acls, key=lambda i: (acls[i]["principal"], acls[i]["resourceName"], i)):
        a = acls[aid]
        out.append(f"\t(principal={a['principal']}, host={a['host']}, "
                   f"operation={OPERATIONS.get(a['operation'], a['operation'])}, "
                   f"permissionType={PERMISSIONS.get(a['permissionType'], a['permissionType'])}) on "
                   f"ResourcePattern(resourceType={RESOURCE_TYPES.get(a['resourceType'], a['resourceType'])}, "
                   f"name={a['resourceName']}, patternType={PATTERN_TYPES.get(a['patternType'], a['patternType'])})")
    quotas = img["quotas"]
    out.append(f"Client quotas ({len(quotas)} entities):")
    for ent in sorted(quotas):
        out.append(f"\t{ent}\t" + ",".join(f"{k}={v}" for k, v in sorted(quotas[ent].items())))
    return "\n".join(out)


def _report(args: argparse.Namespace) -> int:
    _need_spark("report")
    _check_dir("report", args.dir)
    from pathlib import Path

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise _fail(f"kraftsim spark report: {out} exists and is not a directory")
    from pyspark_kraft import layout
    from pyspark_kraft.report import ReportError, write_report
    from pyspark_kraft.session import spark_session

    spark = spark_session(args.master, "kraftsim spark report", progress=True)
    _quiet(spark)
    try:
        index = write_report(spark, args.dir, out, progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    except (ReportError, layout.LayoutError, ValueError, OSError) as e:
        raise _fail(f"kraftsim spark report: {e}") from None
    finally:
        spark.stop()
    print(index)
    return 0
