"""``kraftsim spark report`` beside a scenario's timeline: the injected faults as spans over the
log's history, and per fault what the log records during it, held to the project's own
single-process reader of the same log. The report itself is made once, by the report test of
test_image_report.py, with :func:`made_up_timeline`; :func:`check_faults_section` holds it to this."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from pyspark_kraft.report import TIMELINE, find_timeline, read_timeline


def fences_in(ref: list[Any], start: int, end: int) -> int:
    return sum(1 for r in ref if start <= r.timestamp < end and (
        r.record_type == "FenceBrokerRecord"
        or (r.record_type == "BrokerRegistrationChangeRecord" and r.msg.fenced == 1)))


def spans_of(ref: list[Any]) -> tuple[int, int, int]:
    first, last = ref[0].timestamp, ref[-1].timestamp
    return first + (last - first) // 5, first + (last - first) // 2, first + 4 * (last - first) // 5


def made_up_timeline(ref: list[Any], directory: Path) -> Path:
    """A scenario's timeline over the log's own time: a silence from a to b, the controller down
    from b to c, a resignation at c."""
    first, last = ref[0].timestamp, ref[-1].timestamp
    a, b, c = spans_of(ref)
    events = [
        {"event": "scenario", "wall_ms": first, "name": "made-up", "seed": 9, "file": None},
        {"event": "ready", "wall_ms": first},
        {"event": "fault", "process": "fleet", "id": "f1", "kind": "silence", "description": "silence brokers 2",
         "seed": 1, "start_wall_ms": a, "end_wall_ms": b, "hits": 1, "reason": "expired"},
        {"event": "fault", "process": "controller#1", "id": "f2", "kind": "resign", "description": "resign",
         "seed": 2, "start_wall_ms": c, "end_wall_ms": c, "hits": 1, "reason": "done"},
        {"event": "controller-killed", "wall_ms": b},
        {"event": "controller-started", "wall_ms": c},
        {"event": "check", "wall_ms": last, "name": "x", "result": "pass"},
        {"event": "end", "wall_ms": last, "result": "pass"},
    ]
    path = directory / TIMELINE
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    tl = read_timeline(path)
    assert [(s["label"], s["start_ms"], s["end_ms"]) for s in tl.spans] == [
        ("f1 silence", a, b), ("controller down", b, c), ("f2 resign", c, c)]
    return path


def check_faults_section(ref: list[Any], out: Path, page: str) -> None:
    a, b, c = spans_of(ref)
    assert "<h2 id='s5'>Injected faults</h2>" in page and "Scenario made-up (seed 9, inline)" in page
    assert (out / "faults_timeline.png").stat().st_size > 10_000
    rows = pq.read_table(out / "tables" / "injected_faults.parquet").to_pylist()
    assert [(r["fault"], r["kind"], r["process"]) for r in rows] == [
        ("f1 silence", "silence", "fleet"), ("controller down", "controller down", "controller"),
        ("f2 resign", "resign", "controller#1")]
    # What the log says happened in each span: an instant fault counts the second after it.
    assert [r["fences"] for r in rows] == [fences_in(ref, a, b), fences_in(ref, b, c), fences_in(ref, c, c + 1000)]
    assert rows[0]["fences"] > 0
    assert [r["seconds"] for r in rows] == [(b - a) / 1000, (c - b) / 1000, 0.0]


def test_a_timeline_is_found_beside_a_scenarios_controller_data(tmp_path: Path) -> None:
    data = tmp_path / "work" / "controller" / "data"
    (data / "__cluster_metadata-0").mkdir(parents=True)
    (data / "__cluster_metadata-0" / "00000000000000000000.log").touch()
    assert find_timeline(str(data)) is None
    (tmp_path / "work" / TIMELINE).write_text('{"event": "scenario"}\n')
    assert find_timeline(str(data)) == tmp_path / "work" / TIMELINE
    assert find_timeline(str(data / "__cluster_metadata-0")) == tmp_path / "work" / TIMELINE
