"""The one-screen summary of one or many simulation runs."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from kraftsim.raft.sim.config import SimConfig
from kraftsim.raft.sim.runner import SimResult


@dataclass(slots=True)
class Totals:
    """Many runs, added up."""

    runs: int = 0
    steps: int = 0
    virtual_ms: int = 0
    elections: int = 0
    max_epoch: int = 0
    appended: int = 0
    committed_records: int = 0
    snapshots: int = 0
    snapshots_fetched: int = 0
    truncations: int = 0
    invariant_checks: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    voter_changes: Counter[tuple[str, str]] = field(default_factory=Counter)
    network: Counter[str] = field(default_factory=Counter)
    last: SimResult | None = None

    def add(self, r: SimResult) -> None:
        self.runs += 1
        self.steps += r.steps
        self.virtual_ms += r.virtual_ms
        self.elections += r.elections
        self.max_epoch = max(self.max_epoch, r.max_epoch)
        self.appended += r.appended
        self.committed_records += r.committed_records
        self.snapshots += r.snapshots
        self.snapshots_fetched += r.snapshots_fetched
        self.truncations += r.truncations
        self.invariant_checks += r.invariant_checks
        self.faults.update(r.faults)
        self.voter_changes.update(r.voter_changes)
        n = r.network
        self.network.update(sent=n.sent, lost=n.lost, duplicated=n.duplicated, partitioned=n.partitioned,
                            refused=n.refused, unsupported=n.unsupported, encoded_bytes=n.bytes_encoded)
        self.last = r


def _leaders(r: SimResult, width: int = 64) -> str:
    text = " ".join(f"{epoch}:{leader}" for epoch, leader in r.leaders.items())
    return text if len(text) <= width else text[:width - 3] + "..."


def _changes(totals: Totals) -> str:
    """The voter changes asked, committed and refused, by kind and answer."""
    asked = sum(totals.voter_changes.values())
    done = {kind: n for (kind, code), n in totals.voter_changes.items() if code == "NONE"}
    failed = Counter[str]()
    for (_, code), n in totals.voter_changes.items():
        if code != "NONE":
            failed[code] += n
    refused = ", ".join(f"{code} {n}" for code, n in sorted(failed.items())) or "none"
    return (f"{asked:,} changes answered: {done.get('add', 0):,} adds and {done.get('remove', 0):,} removals "
            f"committed; refused or failed: {refused}")


RELEASES = {"3.9": "", "4.0": ", Kafka 4.0 elections (pre-vote)", "4.1": ", Kafka 4.1 elections (pre-vote)",
            "mixed": ", Kafka 4.0 elections (pre-vote) on odd ids, 3.9 on even"}


def render(config: SimConfig, first_seed: int, totals: Totals, wall_s: float) -> str:
    seeds = f"seed {first_seed}" if totals.runs == 1 else f"seeds {first_seed}..{first_seed + totals.runs - 1}"
    virtual_s = totals.virtual_ms / 1000
    faults = ", ".join(f"{k} {v}" for k, v in sorted(totals.faults.items())) or "none"
    net = totals.network
    lines = [
        f"kraftsim simulate: {config.voters} voters, {config.observers} observers, {seeds}, "
        f"{config.seconds:g}s of faults then healed"
        + RELEASES[config.release],
        f"  time         {virtual_s:,.1f} s simulated in {wall_s:.2f} s "
        f"({virtual_s / wall_s if wall_s else 0:,.0f}x), {totals.runs / wall_s * 60 if wall_s else 0:,.0f} seeds/min",
        f"  elections    {totals.elections:,} won, highest epoch {totals.max_epoch}",
    ]
    if totals.runs == 1 and totals.last is not None:
        lines.append(f"  leaders      epoch:leader {_leaders(totals.last)}")
        lines.append(f"  trace        {totals.last.digest} ({totals.steps:,} events)")
    lines += [
        f"  committed    {totals.committed_records:,} of {totals.appended:,} records appended "
        f"(the rest were lost with a deposed leader, or not yet committed)",
        f"  faults       {faults}",
        f"  network      {net['sent']:,} messages: {net['lost']:,} lost, {net['duplicated']:,} duplicated, "
        f"{net['partitioned']:,} cut by partitions, {net['refused']:,} refused (peer down)"
        + (f", {net['unsupported']:,} pre-votes a 3.9 voter could not take" if net["unsupported"] else "")
        + (f", {net['encoded_bytes']:,} bytes encoded" if net["encoded_bytes"] else ""),
        f"  logs         {totals.snapshots:,} snapshots taken, {totals.snapshots_fetched:,} fetched by followers, "
        f"{totals.truncations:,} truncations",
    ]
    if config.voter_changes:
        lines.append(f"  voters       {_changes(totals)}")
        if totals.runs == 1 and totals.last is not None:
            lines.append(f"  committed    changes in order: {' '.join(totals.last.committed_changes) or 'none'}")
    lines += [
        f"  invariants   held at all {totals.invariant_checks:,} checks (after every event, at start and heal)",
    ]
    return "\n".join(lines)
