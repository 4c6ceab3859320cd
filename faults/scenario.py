"""``kraftsim scenario run FILE --seed N``: a timed story of brokers, topics, faults and checks,
played against a controller that misbehaves exactly when the file says.

A scenario file (YAML) names a controller (config on top of the defaults), a fleet of simulated
brokers, timed steps and checks; ``deploy/scenarios/`` holds three, and docs/faults.md describes
every field. The runner starts the controller as a process (so that it can be killed and
restarted like one) with fault injection on, runs the fleet in its own process (its faults
applied directly), waits until every broker is registered and unfenced, and calls that t = 0.
Then each step runs at its time (steps at the same time in file order, each without waiting
for the ones before it), each check is judged at, by or through its time on what the controller
reports (``/metrics``, ``/healthz``) and what the fleet has replayed of the metadata log, and a
status line says where things stand.

The same file and seed give the same sequence of steps and faults with the same seeds, so the
same decisions where the decisions are the runner's or a fault's own (which brokers a pick
takes, the draws of a fraction in the order its requests come); timings and what they lead to
(how many heartbeats a fault meets) are the machine's. The summary prints the seed.

Everything that happened is written as JSON lines to ``kraftsim-timeline.jsonl`` in the work
directory, beside the controller's data (``controller/data``): ``kraftsim spark report`` finds
it there and draws the faults as shaded spans over the log's own history.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kraftsim.faults.spec import KINDS, FaultError, parse, parse_duration_ms

log = logging.getLogger("kraftsim.scenario")

TIMELINE = "kraftsim-timeline.jsonl"
SAMPLE_EVERY_S = 0.1
CHECK_EVERY_S = 0.2
SETUP_TIMEOUT_S = 60.0
FLEET_ONLY = frozenset({"silence", "flap", "restart", "lag", "features"})
CONTROLLER_ONLY = frozenset({"resign", "disk", "clock-jump", "voter-partition"})
ACTIONS = ("create_topics", "delete_topics", "workload", "fault", "clear_faults", "failover", "reassign",
           "cancel_reassignment")
RETRIABLE = frozenset({7, 41, 51})  # REQUEST_TIMED_OUT, NOT_CONTROLLER, CONCURRENT_TRANSACTIONS
TOPIC_ALREADY_EXISTS = 36


class ScenarioError(Exception):
    """The file cannot be run as written (one line for the user)."""


# ---- the file ------------------------------------------------------------------------------------

@dataclass
class Step:
    index: int
    at_ms: int
    action: str
    args: dict[str, Any]

    def describe(self) -> str:
        a = self.args
        if self.action == "fault":
            return f"fault {parse(_fault_doc(a)).describe()}"
        if self.action == "failover":
            return f"failover by {a['how']}" + (f", restarted {a['restart_after_ms']} ms later"
                                                if a.get("restart_after_ms") is not None else "")
        if self.action == "create_topics":
            return f"create {len(a['names'])} topics"
        if self.action == "workload":
            return f"create {a['topics_per_second']:g} topics/s for {a['duration_ms']} ms"
        return self.action.replace("_", " ") + (f" {a.get('topic')}" if a.get("topic") else "")


@dataclass
class Check:
    index: int
    name: str
    mode: str  # "at", "by" (eventually, by then) or "during" (at every sample between the two)
    start_ms: int
    end_ms: int
    expect: dict[str, Any]
    result: str = "pending"  # then "pass" or "fail"
    observed: str = ""
    decided_ms: int | None = None

    def when(self) -> str:
        if self.mode == "during":
            return f"during {self.start_ms / 1000:g}-{self.end_ms / 1000:g} s"
        return f"{self.mode} {self.end_ms / 1000:g} s"


@dataclass
class Brokers:
    count: int = 3
    heartbeat_interval_ms: int = 500
    session_timeout_ms: int = 2000
    start_rate: float = 200.0
    listen: bool = False


@dataclass
class Scenario:
    name: str
    path: Path | None
    description: str
    seed: int
    duration_ms: int
    controller_config: dict[str, str]
    brokers: Brokers
    steps: list[Step]
    checks: list[Check]


def _dict(v: Any, what: str) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ScenarioError(f"{what}: expected a mapping")
    return v


def _ms(v: Any, what: str) -> int:
    try:
        return parse_duration_ms(v, what)
    except FaultError as e:
        raise ScenarioError(str(e)) from None


def _int(v: Any, what: str, lo: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ScenarioError(f"{what}: expected an integer of at least {lo}, got {v!r}")
    return v


def _fault_doc(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in args.items() if k != "target"}


def load(path: Path, text: str | None = None) -> Scenario:
    """Read and check a scenario file; ScenarioError says what is wrong and where."""
    try:
        import yaml
    except ImportError:
        raise ScenarioError("scenarios need PyYAML: pip install 'kraftsim[scenario]'") from None
    try:
        doc = yaml.safe_load(text if text is not None else path.read_text())
    except OSError as e:
        raise ScenarioError(f"{path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ScenarioError(f"{path}: not YAML: {str(e).splitlines()[0]}") from None
    try:
        return parse_scenario(doc, path)
    except ScenarioError as e:
        raise ScenarioError(f"{path}: {e}") from None


def parse_scenario(doc: Any, path: Path | None = None) -> Scenario:
    d = _dict(doc, "the file")
    known = {"name", "description", "seed", "duration", "controller", "brokers", "steps", "checks"}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ScenarioError(f"unknown key(s) {', '.join(unknown)} (a scenario has {', '.join(sorted(known))})")
    ctl = _dict(d.get("controller"), "controller")
    if set(ctl) - {"config"}:
        raise ScenarioError("controller: takes config (server.properties keys and values)")
    config = {str(k): str(v).lower() if isinstance(v, bool) else str(v)
              for k, v in _dict(ctl.get("config"), "controller.config").items()}
    b = _dict(d.get("brokers"), "brokers")
    if set(b) - {"count", "heartbeat_interval", "session_timeout", "start_rate", "listen"}:
        raise ScenarioError("brokers: takes count, heartbeat_interval, session_timeout, start_rate and listen")
    brokers = Brokers(count=_int(b.get("count", 3), "brokers.count", 1),
                      heartbeat_interval_ms=_ms(b.get("heartbeat_interval", "500ms"), "brokers.heartbeat_interval"),
                      session_timeout_ms=_ms(b.get("session_timeout", "2s"), "brokers.session_timeout"),
                      start_rate=float(b.get("start_rate", 200.0)), listen=bool(b.get("listen", False)))
    if brokers.session_timeout_ms <= brokers.heartbeat_interval_ms:
        raise ScenarioError("brokers: session_timeout must be longer than heartbeat_interval")
    steps = [_step(i, s, brokers) for i, s in enumerate(d.get("steps") or [], 1)]
    checks = [_check(i, c) for i, c in enumerate(d.get("checks") or [], 1)]
    duration = _ms(d["duration"], "duration") if "duration" in d else 0
    last = max([s.at_ms for s in steps] + [c.end_ms for c in checks] + [duration])
    seed = d.get("seed", 0)
    return Scenario(name=str(d.get("name") or (path.stem if path else "scenario")), path=path,
                    description=str(d.get("description") or "").strip(), seed=_int(seed, "seed"),
                    duration_ms=last, controller_config=config, brokers=brokers, steps=steps, checks=checks)


def _step(index: int, raw: Any, brokers: Brokers) -> Step:
    s = _dict(raw, f"step {index}")
    where = f"step {index}"
    if "at" not in s:
        raise ScenarioError(f"{where}: needs at (when it runs, e.g. 10s)")
    actions = [a for a in s if a != "at"]
    if len(actions) != 1 or actions[0] not in ACTIONS:
        raise ScenarioError(f"{where}: give exactly one action of {', '.join(ACTIONS)}")
    action = actions[0]
    raw_args = s[action]
    at = _ms(s["at"], f"{where}: at")
    if action == "failover":
        a = {"how": raw_args} if isinstance(raw_args, str) else _dict(raw_args, where)
        if a.get("how") not in ("resign", "kill"):
            raise ScenarioError(f"{where}: failover: how is resign or kill")
        args: dict[str, Any] = {"how": a["how"]}
        if a["how"] == "kill":
            args["restart_after_ms"] = _ms(a.get("restart_after", "2s"), f"{where}: restart_after")
        return Step(index, at, action, args)
    a = _dict(raw_args, f"{where}: {action}")
    if action == "fault":
        target = a.get("target")
        if target not in (None, "controller", "fleet"):
            raise ScenarioError(f"{where}: target is controller or fleet")
        try:
            spec = parse(_fault_doc(a))
        except FaultError as e:
            raise ScenarioError(f"{where}: {e}") from None
        if target is None:
            target = "fleet" if spec.kind in FLEET_ONLY else "controller"
        if (target == "fleet" and spec.kind in CONTROLLER_ONLY) or (target == "controller" and spec.kind in FLEET_ONLY):
            raise ScenarioError(f"{where}: a {spec.kind} fault ({KINDS[spec.kind][0]}) is not for the {target}")
        return Step(index, at, action, {**a, "target": target})
    if action == "create_topics":
        return Step(index, at, action, _topics_args(a, where, burst=True))
    if action == "delete_topics":
        names = a.get("names")
        if not isinstance(names, list) or not names:
            raise ScenarioError(f"{where}: delete_topics: names")
        return Step(index, at, action, {"names": [str(n) for n in names]})
    if action == "workload":
        t = _topics_args({**a, "count": 0}, where, burst=False)
        rate = a.get("topics_per_second")
        if isinstance(rate, bool) or not isinstance(rate, int | float) or rate <= 0:
            raise ScenarioError(f"{where}: workload: topics_per_second")
        t.update(topics_per_second=float(rate), duration_ms=_ms(a.get("duration", "10s"), f"{where}: duration"))
        return Step(index, at, action, t)
    if action in ("reassign", "cancel_reassignment"):
        topic = a.get("topic")
        if not isinstance(topic, str):
            raise ScenarioError(f"{where}: {action}: topic")
        args = {"topic": topic}
        if action == "reassign":
            replicas = a.get("replicas")
            if (not isinstance(replicas, list) or not replicas
                    or not all(isinstance(r, int) and 1 <= r <= brokers.count for r in replicas)):
                raise ScenarioError(f"{where}: reassign: replicas (broker ids of the fleet, 1-{brokers.count})")
            args["replicas"] = replicas
        return Step(index, at, action, args)
    return Step(index, at, action, a)  # clear_faults


def _topics_args(a: dict[str, Any], where: str, burst: bool) -> dict[str, Any]:
    names = a.get("names")
    prefix = str(a.get("prefix", "topic-"))
    if names is None:
        count = _int(a.get("count", 1 if burst else 0), f"{where}: count", 0)
        names = [f"{prefix}{i}" for i in range(count)]
    elif not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ScenarioError(f"{where}: names: a list of topic names")
    replicas = a.get("replicas")
    if replicas is not None and (not isinstance(replicas, list) or not replicas
                                 or not all(isinstance(r, int) and not isinstance(r, bool) for r in replicas)):
        raise ScenarioError(f"{where}: replicas: a list of broker ids")
    return {"names": names, "prefix": prefix, "partitions": _int(a.get("partitions", 1), f"{where}: partitions", 1),
            "replication_factor": _int(a.get("replication_factor", 1), f"{where}: replication_factor", 1),
            "per_request": _int(a.get("per_request", 10), f"{where}: per_request", 1), "replicas": replicas}


PREDICATES = ("unfenced", "fenced", "fenced_at_most", "fenced_at_least", "active_controller",
              "leader_epoch_at_least", "offline_partitions", "reassigning_partitions", "topics_at_least",
              "acknowledged_topics_present", "acknowledged_topics_at_least", "injected_faults_active", "metric")


def _check(index: int, raw: Any) -> Check:
    c = _dict(raw, f"check {index}")
    where = f"check {index}"
    modes = [m for m in ("at", "by", "during") if m in c]
    if len(modes) != 1:
        raise ScenarioError(f"{where}: give one of at, by or during")
    mode = modes[0]
    if mode == "during":
        span = c["during"]
        if not isinstance(span, list) or len(span) != 2:
            raise ScenarioError(f"{where}: during: [from, to]")
        start, end = _ms(span[0], where), _ms(span[1], where)
        if end < start:
            raise ScenarioError(f"{where}: during: the end comes before the start")
    else:
        end = _ms(c[mode], where)
        start = _ms(c.get("after", 0), where) if mode == "by" else end
    expect = _dict(c.get("expect"), f"{where}: expect")
    if not expect:
        raise ScenarioError(f"{where}: expect: what must hold ({', '.join(PREDICATES)})")
    bad = sorted(set(expect) - set(PREDICATES))
    if bad:
        raise ScenarioError(f"{where}: unknown expectation(s) {', '.join(bad)} (known: {', '.join(PREDICATES)})")
    unexpected = sorted(set(c) - {"name", "expect", "after", mode})
    if unexpected:
        raise ScenarioError(f"{where}: unknown key(s) {', '.join(unexpected)}")
    return Check(index, str(c.get("name") or f"check {index}"), mode, start, end, expect)


# ---- what the runner sees ----------------------------------------------------------------------------

@dataclass
class Sample:
    t_ms: int
    metrics: dict[str, float] | None  # None: the controller did not answer
    health: dict[str, Any] | None
    image: Any  # the fleet's replayed MetadataImage
    acked: set[str]
    brokers: int


def _metric(sample: Sample, name: str) -> float | None:
    """A controller metric by its full name, or by its KafkaController bean's short one
    (``activebrokercount`` for ``kafka_controller_kafkacontroller_activebrokercount``)."""
    if sample.metrics is None:
        return None
    return sample.metrics.get(name.removeprefix("kafka_controller_kafkacontroller_"))


def judge(expect: dict[str, Any], s: Sample) -> tuple[bool, str]:
    """Whether every expectation holds on the sample, and what was seen (for the summary)."""
    seen: list[str] = []
    ok = True
    for name, want in expect.items():
        good, got = _judge_one(name, want, s)
        ok = ok and good
        seen.append(f"{name} {got}")
    return ok, ", ".join(seen)


_OPS: dict[str, Callable[[float, float], bool]] = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, ">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b, "<": lambda a, b: a < b}


def _judge_one(name: str, want: Any, s: Sample) -> tuple[bool, str]:
    if name in ("unfenced", "fenced", "fenced_at_most", "fenced_at_least", "offline_partitions"):
        metric = {"unfenced": "activebrokercount", "offline_partitions": "offlinepartitionscount"}.get(
            name, "fencedbrokercount")
        v = _metric(s, metric)
        if v is None:
            return False, "unknown (the controller did not answer)"
        target = s.brokers if want == "all" else want
        good = (v <= target if name == "fenced_at_most" else v >= target if name == "fenced_at_least"
                else v == target)
        return good, f"{int(v)}"
    if name == "active_controller":
        active = s.health is not None and s.health.get("status") == "active"
        return active == bool(want), "active" if active else "not active"
    if name == "leader_epoch_at_least":
        epoch = s.health.get("leaderEpoch") if s.health is not None else None
        return epoch is not None and epoch >= want, f"{epoch}"
    if name == "injected_faults_active":
        n = (s.health or {}).get("injectedFaults", {}).get("active")
        return n == want, f"{n}"
    if name == "reassigning_partitions":
        n = len(s.image.topics.reassigning_partitions())
        return n == want, f"{n}"
    if name == "topics_at_least":
        n = s.image.topics.topic_count
        return n >= want, f"{n}"
    if name == "acknowledged_topics_present":
        missing = sorted(t for t in s.acked if t not in s.image.topics.by_name)
        return (not missing) == bool(want), f"{len(s.acked) - len(missing)} of {len(s.acked)} present" + (
            f" (missing {', '.join(missing[:5])}{'...' if len(missing) > 5 else ''})" if missing else "")
    if name == "acknowledged_topics_at_least":
        return len(s.acked) >= want, f"{len(s.acked)}"
    # metric: {name, op, value} or a list of them, on the controller's /metrics by full name
    conds = want if isinstance(want, list) else [want]
    parts, good = [], True
    for cond in conds:
        if not isinstance(cond, dict) or "name" not in cond or cond.get("op", "==") not in _OPS:
            return False, f"bad metric expectation {cond!r}"
        v = _metric(s, str(cond["name"]))
        op = cond.get("op", "==")
        this = v is not None and _OPS[op](v, float(cond.get("value", 0)))
        good = good and this
        parts.append(f"{cond['name']} = {v}")
    return good, "; ".join(parts)


# ---- the run -------------------------------------------------------------------------------------------

@dataclass
class FaultRecord:
    """A fault the runner injected, with its span (for the timeline and the report)."""

    key: str
    process: str
    step: int
    id: str
    kind: str
    description: str
    seed: int
    start_wall_ms: int
    decisions: dict[str, Any] = field(default_factory=dict)
    end_wall_ms: int | None = None
    reason: str = ""
    hits: int = 0


@dataclass
class Result:
    scenario: Scenario
    seed: int
    checks: list[Check]
    step_errors: list[str]
    workdir: Path
    timeline: Path

    @property
    def passed(self) -> bool:
        return not self.step_errors and all(c.result == "pass" for c in self.checks)

    def summary(self) -> list[str]:
        s = self.scenario
        passed = sum(c.result == "pass" for c in self.checks)
        lines = [f"scenario {s.name} ({s.path or 'inline'}), seed {self.seed}: "
                 f"{'PASSED' if self.passed else 'FAILED'}, {passed} of {len(self.checks)} checks passed"
                 + (f", {len(self.step_errors)} step(s) failed" if self.step_errors else "")]
        for c in self.checks:
            at = f"at {c.decided_ms / 1000:.1f} s" if c.decided_ms is not None else "not judged"
            lines.append(f"  {c.result.upper():4}  {c.name} ({c.when()}): {at}: {c.observed}")
        for e in self.step_errors:
            lines.append(f"  STEP  {e}")
        data = self.workdir / "controller" / "data"
        lines.append(f"timeline: {self.timeline}")
        lines.append(f"report: kraftsim spark report {data} --out {self.workdir / 'report'}")
        return lines


class Runner:
    def __init__(self, scenario: Scenario, seed: int | None, workdir: Path, out: IO[str] | None = None,
                 tty: bool = False, status_every_s: float = 5.0) -> None:
        self.s = scenario
        self.seed = scenario.seed if seed is None else seed
        self.workdir = workdir
        self.out = out if out is not None else sys.stdout
        self.tty = tty
        self.status_every_s = 1.0 if tty else status_every_s
        self.timeline_path = workdir / TIMELINE
        self._timeline: IO[str] | None = None
        self.t0 = 0.0
        self.controller: Any = None  # faults.processes.Controller
        self.controller_life = 1
        self.fleet: Any = None  # broker.fleet.Fleet
        self.acked: set[str] = set()
        self.sample: Sample | None = None
        self.faults: list[FaultRecord] = []
        self.step_errors: list[str] = []
        self.done_steps = 0
        self._admin: Any = None  # a KafkaClient to the controller, reconnected as needed
        self._tasks: list[asyncio.Task[Any]] = []
        self._down_since: int | None = None  # the controller killed and not back yet

    # -- time and the timeline ------------------------------------------------------------------
    def t_ms(self) -> int:
        return int((time.monotonic() - self.t0) * 1000)

    def event(self, what: str, **fields: Any) -> None:
        doc = {"event": what, "t_ms": self.t_ms() if self.t0 else None, "wall_ms": time.time_ns() // 1_000_000,
               **fields}
        if self._timeline is not None:
            self._timeline.write(json.dumps(doc) + "\n")
            self._timeline.flush()

    def say(self, text: str) -> None:
        if self.tty:
            self.out.write("\r\x1b[K" + text + "\n")
        else:
            self.out.write(text + "\n")
        self.out.flush()

    # -- the whole run ---------------------------------------------------------------------------
    async def run(self) -> Result:
        from kraftsim.faults.processes import Controller

        self.workdir.mkdir(parents=True, exist_ok=True)
        self._timeline = open(self.timeline_path, "w")  # noqa: SIM115 - closed at the end of run()
        try:
            self.event("scenario", name=self.s.name, file=str(self.s.path) if self.s.path else None, seed=self.seed,
                       brokers=self.s.brokers.count, description=self.s.description)
            self.say(f"scenario {self.s.name}, seed {self.seed}: starting a controller and {self.s.brokers.count} "
                     f"brokers in {self.workdir}")
            self.controller = Controller(self.workdir / "controller", self.s.controller_config)
            await asyncio.to_thread(self.controller.start)
            self.event("controller-started", life=self.controller_life)
            await self._start_fleet()
            self.t0 = time.monotonic()
            self.event("ready")
            sampler = asyncio.create_task(self._sampler(), name="scenario-sampler")
            await self._sample_once()
            status = asyncio.create_task(self._status(), name="scenario-status")
            checks = [asyncio.create_task(self._judge(c)) for c in self.s.checks]
            steps = [asyncio.create_task(self._run_step(st)) for st in self.s.steps]
            await asyncio.sleep(self.s.duration_ms / 1000)
            await asyncio.gather(*checks)
            for t in steps + self._tasks:
                t.cancel()
            await asyncio.gather(*steps, *self._tasks, return_exceptions=True)
            status.cancel()
            sampler.cancel()
            await self._finish_faults()
            self.say(self.status_line())
            result = Result(self.s, self.seed, self.s.checks, self.step_errors, self.workdir, self.timeline_path)
            self.event("end", result="pass" if result.passed else "fail")
            return result
        finally:
            await self._teardown()
            self._timeline.close()

    async def _start_fleet(self) -> None:
        from kraftsim.broker.fleet import Fleet, FleetOptions

        b = self.s.brokers
        c = self.controller
        self.fleet = Fleet(FleetOptions(
            bootstrap=[("127.0.0.1", c.port)], count=b.count, cluster_id=c.cluster_id, seed=self.seed,
            heartbeat_interval_ms=b.heartbeat_interval_ms, session_timeout_ms=b.session_timeout_ms,
            start_rate=b.start_rate, status_interval_s=3600, listen=("127.0.0.1", 0) if b.listen else None,
            faults_enable=True))
        await self.fleet.start()
        deadline = time.monotonic() + SETUP_TIMEOUT_S
        while True:
            m = await asyncio.to_thread(self._metrics)
            if m is not None and m.get("activebrokercount") == b.count:
                return
            if time.monotonic() > deadline:
                raise ScenarioError(f"the {b.count} brokers were not all unfenced within {SETUP_TIMEOUT_S:g} s")
            await asyncio.sleep(0.1)

    async def _teardown(self) -> None:
        if self._admin is not None:
            await self._admin.close()
        if self.fleet is not None:
            self.fleet.request_stop()
            try:
                await self.fleet.shutdown(timeout_s=30)
            except Exception as e:  # noqa: BLE001 - the controller may be gone: what is left is killed
                log.warning("fleet shutdown: %r", e)
        if self.controller is not None:
            await asyncio.to_thread(self.controller.stop)

    # -- watching ----------------------------------------------------------------------------------
    def _metrics(self) -> dict[str, float] | None:
        try:
            return self.controller.metrics()
        except (OSError, ValueError):
            return None

    def _health(self) -> dict[str, Any] | None:
        try:
            return self.controller.healthz()
        except (OSError, ValueError):
            return None

    async def _sample_once(self) -> None:
        if self._down_since is not None:
            metrics, health = None, None
        else:
            metrics, health = await asyncio.gather(asyncio.to_thread(self._metrics), asyncio.to_thread(self._health))
        assert self.fleet.observer is not None
        self.sample = Sample(self.t_ms(), metrics, health, self.fleet.observer.image, set(self.acked),
                             self.s.brokers.count)

    async def _sampler(self) -> None:
        while True:
            await asyncio.sleep(SAMPLE_EVERY_S)
            await self._sample_once()

    async def _judge(self, c: Check) -> None:
        await self._until(c.start_ms)
        while True:
            s = self.sample
            assert s is not None
            ok, seen = judge(c.expect, s)
            c.observed = seen
            now = self.t_ms()
            if c.mode == "at" or (c.mode == "by" and (ok or now >= c.end_ms)) or (c.mode == "during" and not ok):
                c.result, c.decided_ms = ("pass" if ok else "fail"), now
                break
            if c.mode == "during" and now >= c.end_ms:
                c.result, c.decided_ms = "pass", now
                break
            await asyncio.sleep(CHECK_EVERY_S)
        self.event("check", index=c.index, name=c.name, result=c.result, observed=c.observed)

    def status_line(self) -> str:
        s = self.sample
        m = s.metrics if s is not None else None
        active = [f for f in self.faults if f.end_wall_ms is None]
        brokers = ("controller down" if m is None else
                   f"brokers {int(m.get('activebrokercount', 0))} unfenced, {int(m.get('fencedbrokercount', 0))} fenced")
        epoch = (s.health or {}).get("leaderEpoch") if s is not None else None
        checks = self.s.checks
        return (f"t={self.t_ms() / 1000:5.1f}s/{self.s.duration_ms / 1000:g}s | steps {self.done_steps}/"
                f"{len(self.s.steps)} | faults active {len(active)}"
                + (f" ({', '.join(f'{f.kind}@{f.process}' for f in active[:3])})" if active else "")
                + f" | {brokers} | epoch {epoch} | topics acknowledged {len(self.acked)} | checks "
                f"{sum(c.result == 'pass' for c in checks)} passed, {sum(c.result == 'fail' for c in checks)} failed, "
                f"{sum(c.result == 'pending' for c in checks)} pending")

    async def _status(self) -> None:
        while True:
            await asyncio.sleep(self.status_every_s)
            await self._follow_faults()
            line = self.status_line()
            if self.tty:
                self.out.write("\r\x1b[K" + line)
                self.out.flush()
            else:
                self.say(line)

    # -- steps ------------------------------------------------------------------------------------------
    async def _until(self, at_ms: int) -> None:
        wait = at_ms / 1000 - (time.monotonic() - self.t0)
        if wait > 0:
            await asyncio.sleep(wait)

    async def _run_step(self, st: Step) -> None:
        await self._until(st.at_ms)
        self.event("step", index=st.index, action=st.action, description=st.describe())
        try:
            actions: dict[str, Callable[[Step], Any]] = {
                "create_topics": self._do_create_topics, "delete_topics": self._do_delete_topics,
                "workload": self._do_workload, "fault": self._do_fault, "clear_faults": self._do_clear_faults,
                "failover": self._do_failover, "reassign": self._do_reassign,
                "cancel_reassignment": self._do_cancel_reassignment}
            await actions[st.action](st)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a step that fails fails the scenario, with its reason
            why = f"step {st.index} ({st.describe()}) at {self.t_ms() / 1000:.1f} s: {e}"
            self.step_errors.append(why)
            self.event("step-failed", index=st.index, error=str(e))
            log.warning("%s", why)
        finally:
            self.done_steps += 1

    async def _do_fault(self, st: Step) -> None:
        doc = _fault_doc(st.args)
        target = st.args["target"]
        doc.setdefault("seed", (self.seed * 7919 + st.index) % 2**31)
        if target == "fleet":
            registry = self.fleet.faults
            assert registry is not None
            fault = registry.add(doc).to_json()
        else:
            fault = await asyncio.to_thread(self.controller.faults.add, doc)
        process = "fleet" if target == "fleet" else f"controller#{self.controller_life}"
        rec = FaultRecord(f"{process}:{fault['id']}", process, st.index, fault["id"], fault["kind"],
                          fault["description"], fault["seed"], fault["started_ms"], fault.get("decisions") or {})
        if fault.get("state") not in (None, "active"):  # an instant kind: over as it began
            rec.end_wall_ms, rec.reason, rec.hits = fault["started_ms"], fault["state"], fault["hits"]
        self.faults.append(rec)
        self.event("fault-start", step=st.index, process=process, id=rec.id, kind=rec.kind,
                   description=rec.description, seed=rec.seed, decisions=rec.decisions)

    async def _do_clear_faults(self, st: Step) -> None:
        if self.fleet.faults is not None:
            self.fleet.faults.clear()
        if self._down_since is None:
            await asyncio.to_thread(self.controller.faults.clear)
        await self._follow_faults()

    async def _do_failover(self, st: Step) -> None:
        if st.args["how"] == "resign":
            await self._do_fault(Step(st.index, st.at_ms, "fault", {"kind": "resign", "target": "controller"}))
            return
        # Kill the leader. With one voter nothing takes over until it is restarted; in a quorum
        # another voter would be elected meanwhile, and the restarted node rejoins as a follower.
        await asyncio.to_thread(self.controller.kill)
        self._down_since = self.t_ms()
        down_wall = time.time_ns() // 1_000_000
        for f in self.faults:
            if f.process == f"controller#{self.controller_life}" and f.end_wall_ms is None:
                f.end_wall_ms, f.reason = down_wall, "controller killed"
        self.event("controller-killed", life=self.controller_life)
        await asyncio.sleep(st.args["restart_after_ms"] / 1000)
        self.controller_life += 1
        await asyncio.to_thread(self.controller.start)
        self._down_since = None
        self.event("controller-started", life=self.controller_life)

    async def _do_create_topics(self, st: Step) -> None:
        a = st.args
        names: list[str] = a["names"]
        batches = [names[i:i + a["per_request"]] for i in range(0, len(names), a["per_request"])]
        results = await asyncio.gather(*(self._create(b, a["partitions"], a["replication_factor"], a["replicas"])
                                         for b in batches))
        failed = [f"{n}: {why}" for r in results for n, why in r.items()]
        if failed:
            raise ScenarioError(f"{len(failed)} topic(s) not created: {'; '.join(failed[:3])}")

    async def _do_workload(self, st: Step) -> None:
        a = st.args
        period = 1 / a["topics_per_second"]
        end = time.monotonic() + a["duration_ms"] / 1000
        i = 0
        pending: set[asyncio.Task[Any]] = set()
        while time.monotonic() < end:
            name = f"{a['prefix']}{i}"
            i += 1
            task = asyncio.create_task(self._create([name], a["partitions"], a["replication_factor"]))
            pending.add(task)
            task.add_done_callback(pending.discard)
            await asyncio.sleep(period)
        if pending:
            await asyncio.gather(*pending)

    async def _do_delete_topics(self, st: Step) -> None:
        from kraftsim.rpc.messages import DeleteTopicsRequest

        req = DeleteTopicsRequest(timeout_ms=30_000, topics=[DeleteTopicsRequest.DeleteTopicState(name=n)
                                                               for n in st.args["names"]],
                                  topic_names=list(st.args["names"]))
        resp = await self._request(req)
        bad = [f"{r.name}: {r.error_code}" for r in resp.responses if r.error_code]
        if bad:
            raise ScenarioError("not deleted: " + ", ".join(bad))
        self.acked -= set(st.args["names"])

    async def _do_reassign(self, st: Step, cancel: bool = False) -> None:
        from kraftsim.rpc.messages import AlterPartitionReassignmentsRequest as R

        topic = self.fleet.observer.image.topics.by_name.get(st.args["topic"])
        if topic is None:
            raise ScenarioError(f"no topic {st.args['topic']}")
        replicas = None if cancel else list(st.args["replicas"])
        req = R(timeout_ms=30_000, topics=[R.ReassignableTopic(name=st.args["topic"], partitions=[
            R.ReassignablePartition(partition_index=p, replicas=replicas) for p in sorted(topic.partitions)])])
        resp = await self._request(req)
        bad = [f"{t.name}-{p.partition_index}: {p.error_code} {p.error_message or ''}".strip()
               for t in resp.responses for p in t.partitions if p.error_code]
        if resp.error_code or bad:
            raise ScenarioError(f"{'cancel' if cancel else 'reassign'}: {resp.error_code} {'; '.join(bad[:3])}")

    async def _do_cancel_reassignment(self, st: Step) -> None:
        await self._do_reassign(st, cancel=True)

    # -- talking to the controller --------------------------------------------------------------------
    async def _request(self, req: Any, timeout: float = 30.0) -> Any:
        from kraftsim.rpc.client import KafkaClient

        if self._admin is None or self._admin.closed:
            self._admin = await KafkaClient.connect("127.0.0.1", self.controller.port, client_id="kraftsim-scenario",
                                                    timeout=5)
            await self._admin.negotiate()
        try:
            return await self._admin.request(req, timeout=timeout)
        except (OSError, ConnectionError, TimeoutError):
            admin, self._admin = self._admin, None
            admin.abort()
            raise

    async def _create(self, names: list[str], partitions: int, rf: int,
                      replicas: list[int] | None = None) -> dict[str, str]:
        """Create the topics, retrying what a client retries (a controller that is away, busy or
        resigned) for up to 30 s; the ones acknowledged are remembered. Returns those that failed.
        ``replicas``: every partition on these brokers, the list turned by one for each partition
        (so that leaders spread), instead of the controller's placement."""
        from kraftsim.rpc.messages import CreateTopicsRequest as CT

        assignments = [] if replicas is None else [
            CT.CreatableReplicaAssignment(partition_index=p, broker_ids=replicas[p % len(replicas):]
                                          + replicas[:p % len(replicas)]) for p in range(partitions)]

        def topic(name: str) -> CT.CreatableTopic:
            if assignments:
                return CT.CreatableTopic(name=name, num_partitions=-1, replication_factor=-1, assignments=assignments)
            return CT.CreatableTopic(name=name, num_partitions=partitions, replication_factor=rf)

        left = list(names)
        failed: dict[str, str] = {}
        deadline = time.monotonic() + 30
        while left:
            req = CT(timeout_ms=30_000, validate_only=False, topics=[topic(n) for n in left])
            try:
                resp = await self._request(req)
            except (OSError, ConnectionError, TimeoutError) as e:
                if time.monotonic() > deadline:
                    return {n: f"no answer: {e}" for n in left}
                await asyncio.sleep(0.2)
                continue
            retry = []
            for t in resp.topics:
                if t.error_code == 0:
                    self.acked.add(t.name)
                elif t.error_code == TOPIC_ALREADY_EXISTS:
                    pass  # created by an attempt whose answer was lost: there, but never acknowledged
                elif t.error_code in RETRIABLE:
                    retry.append(t.name)
                else:
                    failed[t.name] = f"error {t.error_code} {t.error_message or ''}".strip()
            if retry and time.monotonic() > deadline:
                failed.update({n: "still refused after 30 s" for n in retry})
                break
            left = [n for n in retry if n not in self.acked]
            if left:
                await asyncio.sleep(0.2)
        return failed

    # -- faults' ends -----------------------------------------------------------------------------------
    async def _follow_faults(self) -> None:
        """Learn the ends of the faults injected, from the processes' own timelines."""
        events: list[tuple[str, dict[str, Any]]] = []
        if self.fleet.faults is not None:
            events += [("fleet", e) for e in self.fleet.faults.timeline]
        if self._down_since is None and any(f.end_wall_ms is None and f.process.startswith("controller")
                                            for f in self.faults):
            life = self.controller_life
            try:
                got = await asyncio.to_thread(self.controller.faults.timeline)
            except Exception:  # noqa: BLE001 - the controller is away: asked again next time
                got = []
            events += [(f"controller#{life}", e) for e in got]
        by_key = {f.key: f for f in self.faults}
        for process, e in events:
            rec = by_key.get(f"{process}:{e['id']}")
            if rec is not None and e["event"] == "end" and rec.end_wall_ms is None:
                rec.end_wall_ms, rec.reason, rec.hits = e["wall_ms"], e.get("reason", ""), e.get("hits", 0)
                self.event("fault-end", process=process, id=rec.id, kind=rec.kind, reason=rec.reason, hits=rec.hits)

    async def _finish_faults(self) -> None:
        """End whatever is still active (the run is over), and write each fault's span."""
        if self.fleet.faults is not None:
            self.fleet.faults.clear()
        if self._down_since is None:
            try:
                await asyncio.to_thread(self.controller.faults.clear)
            except Exception as e:  # noqa: BLE001
                log.warning("could not clear the controller's faults: %r", e)
        await self._follow_faults()
        now = time.time_ns() // 1_000_000
        for f in self.faults:
            if f.end_wall_ms is None:
                f.end_wall_ms, f.reason = now, "scenario over"
            self.event("fault", step=f.step, process=f.process, id=f.id, kind=f.kind, description=f.description,
                       seed=f.seed, decisions=f.decisions, start_wall_ms=f.start_wall_ms, end_wall_ms=f.end_wall_ms,
                       reason=f.reason, hits=f.hits)


def run(path: Path, seed: int | None, workdir: Path | None, out: IO[str] | None = None,
        tty: bool | None = None) -> Result:
    """Load and run a scenario file (the body of ``kraftsim scenario run``)."""
    scenario = load(path)
    if workdir is None:
        import tempfile

        workdir = Path(tempfile.mkdtemp(prefix=f"kraftsim-scenario-{scenario.name}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(workdir / "scenario.log")
    handler.setFormatter(logging.Formatter("[%(asctime)s,%(msecs)03d] %(levelname)s %(message)s (%(name)s)",
                                           "%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    stream = out if out is not None else sys.stdout
    try:
        runner = Runner(scenario, seed, workdir, stream, stream.isatty() if tty is None else tty)
        return asyncio.run(runner.run())
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        handler.close()
