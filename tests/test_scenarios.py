"""``kraftsim scenario run``: the three stories in deploy/scenarios/ pass against kraftsim, each
with its faults on the timeline; the same file and seed replay the same faults and decisions (and
another seed others); a file that cannot run is one line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests import harness

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "deploy" / "scenarios"


def timeline(workdir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (workdir / "kraftsim-timeline.jsonl").read_text().splitlines()]


def run(path: Path, workdir: Path, *args: str) -> tuple[str, list[dict[str, Any]]]:
    r = harness.kraftsim("scenario", "run", str(path), "--workdir", str(workdir), *args, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr + (workdir / "scenario.log").read_text()[-3000:]
    return r.stdout, timeline(workdir)


def spans(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["process"].split("#")[0], e["kind"]) for e in events if e["event"] == "fault"]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "faults", "extra"), [
    ("controller-failover", [("controller", "resign")], ["controller-killed", "controller-started"]),
    ("flapping-reassignment", [("fleet", "flap")], []),
    ("slow-disk-topic-burst", [("controller", "disk")], []),
])
def test_each_story_passes_with_its_faults_on_the_timeline(tmp_path: Path, name: str, faults: list[Any],
                                                           extra: list[str]) -> None:
    out, events = run(SCENARIOS / f"{name}.yaml", tmp_path)
    seed = {"controller-failover": 1, "flapping-reassignment": 2, "slow-disk-topic-burst": 3}[name]
    summary = next(line for line in out.splitlines() if line.startswith(f"scenario {name} "))
    assert re.fullmatch(rf"scenario {name} \(\S+{name}\.yaml\), seed {seed}: PASSED, (\d+) of \1 checks passed",
                        summary), out
    assert all(line.startswith("  PASS  ") for line in out.splitlines() if line.startswith("  ")), out
    assert spans(events) == faults
    kinds = [e["event"] for e in events]
    assert all(k in kinds for k in extra)
    assert kinds[0] == "scenario" and kinds[-1] == "end" and events[-1]["result"] == "pass"


REPLAY = """
name: replay
duration: 1500ms
brokers: {count: 6, heartbeat_interval: 300ms, session_timeout: 1s}
steps:
  - at: 0s
    fault: {kind: silence, pick: 2, duration: 1s}
  - at: 0s
    fault: {kind: lag, pick: 3, duration: 1s}
  - at: 300ms
    fault: {kind: request, api: BrokerHeartbeat, error: NOT_CONTROLLER, fraction: 0.5, duration: 1s}
  - at: 600ms
    fault: {kind: restart, pick: 1}
checks:
  - name: the controller is up
    at: 1500ms
    expect: {active_controller: true}
"""


def decisions(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(e["step"], e["kind"], e["seed"], json.dumps(e["decisions"], sort_keys=True))
            for e in events if e["event"] == "fault-start"]


@pytest.mark.slow
def test_the_same_seed_replays_the_same_faults_and_decisions(tmp_path: Path) -> None:
    path = tmp_path / "replay.yaml"
    path.write_text(REPLAY)
    out, a = run(path, tmp_path / "a", "--seed", "11")
    assert "seed 11: PASSED" in out
    _, b = run(path, tmp_path / "b", "--seed", "11")
    _, c = run(path, tmp_path / "c", "--seed", "12")
    assert decisions(a) == decisions(b)
    assert [d[1] for d in decisions(a)] == ["silence", "lag", "request", "restart"]
    assert all(json.loads(d[3]).get("brokers") for d in decisions(a) if d[1] != "request")
    assert [d[2] for d in decisions(c)] != [d[2] for d in decisions(a)]
    assert [d[3] for d in decisions(c)] != [d[3] for d in decisions(a)]  # other brokers picked


def test_a_scenario_that_cannot_run_is_one_line(tmp_path: Path) -> None:
    cases = {
        "steps: [{at: 1s, dance: {}}]": "step 1: give exactly one action of create_topics",
        "steps: [{at: 1s, fault: {kind: request, api: Nope, error: NOT_CONTROLLER}}]": "step 1: api: unknown API",
        "steps: [{at: 1s, fault: {kind: silence, pick: 1, target: controller}}]":
            "step 1: a silence fault (simulated brokers stop heartbeating (their process stays up)) is not for the "
            "controller",
        "checks: [{by: 5s, expect: {happy: true}}]": "check 1: unknown expectation(s) happy",
        "brokers: {count: 0}": "brokers.count: expected an integer of at least 1",
        "steps: [": "not YAML",
    }
    for i, (text, message) in enumerate(cases.items()):
        path = tmp_path / f"bad{i}.yaml"
        path.write_text(text)
        r = harness.kraftsim("scenario", "run", str(path), "--workdir", str(tmp_path / f"w{i}"))
        assert r.returncode == 1 and r.stdout == "", (text, r.stdout, r.stderr)
        assert r.stderr.startswith(f"kraftsim scenario run: {path}: ") and message in r.stderr, (text, r.stderr)
        assert r.stderr.count("\n") == 1
    r = harness.kraftsim("scenario", "run", str(tmp_path / "missing.yaml"))
    assert (r.returncode, r.stderr) == (1, f"kraftsim scenario run: {tmp_path / 'missing.yaml'}: "
                                           f"No such file or directory\n")


def test_a_failing_check_fails_the_run_and_says_what_was_seen(tmp_path: Path) -> None:
    path = tmp_path / "fails.yaml"
    path.write_text("brokers: {count: 2}\nchecks:\n  - name: five fenced brokers\n    at: 500ms\n"
                    "    expect: {fenced: 5}\n  - name: the controller is up\n    at: 500ms\n"
                    "    expect: {active_controller: true}\n")
    r = harness.kraftsim("scenario", "run", str(path), "--workdir", str(tmp_path / "w"), "--seed", "4", timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert f"scenario fails ({path}), seed 4: FAILED, 1 of 2 checks passed" in lines
    assert any(re.fullmatch(r"  FAIL  five fenced brokers \(at 0\.5 s\): at \d+\.\d s: fenced 0", ln) for ln in lines)
    assert any(re.fullmatch(r"  PASS  the controller is up \(at 0\.5 s\): at \d+\.\d s: active_controller active", ln)
               for ln in lines)
    assert timeline(tmp_path / "w")[-1] == {**timeline(tmp_path / "w")[-1], "event": "end", "result": "fail"}
