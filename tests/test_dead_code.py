"""Nothing in the package is dead, and nothing in it is there only for the tests.

vulture (the field's dead-code finder) reads the installed packages alone, without tests/ or
benchmarks/: a function, method, class or property that nothing in the package uses is either
dead or a helper only tests call, and belongs out of the package (into the test that needs
it). What the package uses without naming it (callbacks that asyncio or Spark call, getters the
image's journal finds by name, a module's ``__getattr__``) is listed below with the reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

vulture = pytest.importorskip("vulture", reason="vulture comes with the test extra: pip install -e '.[test]'")

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ["rpc", "metadata", "raft", "controller", "broker", "migration", "cli", "faults", "pyspark_kraft",
            "kraftsim/__init__.py"]
KINDS = {"function", "method", "class", "property", "import"}

# (file, name): why the package uses it although no code in it names it.
USED_WITHOUT_A_NAME: dict[tuple[str, str], str] = {
    **{(f"metadata/image/{f}.py", n): "the image's journal finds a slice's getter by name (image.py: 'get_' + kind)"
       for f, n in [("acls", "get_acl"), ("cluster", "get_broker"), ("cluster", "get_controller"),
                    ("configs", "get_config"), ("features", "get_feature"), ("migration", "get_migration_state"),
                    ("producer_ids", "get_producer_ids"), ("quotas", "get_quota"), ("tokens", "get_token"),
                    ("topics", "get_partition"), ("transactions", "get_transaction")]},
    ("metadata/messages.py", "__getattr__"): "a module's attribute hook: the generated record classes by name",
    ("rpc/messages.py", "__getattr__"): "a module's attribute hook: the generated message classes by name",
    ("pyspark_kraft/__init__.py", "__getattr__"): "a module's attribute hook: DefaultSource, imported when Spark asks",
    **{(f"pyspark_kraft/{f}.py", n): "Spark's Python data source API calls it"
       for f, only_here in (("source", ("streamReader", "reportLatestOffset")), ("network", ()))
       for n in (*only_here, "initialOffset", "getDefaultReadLimit", "prepareForTriggerAvailableNow", "latestOffset")},
    **{("rpc/client.py", n): "asyncio's protocol callback" for n in ("connection_made", "buffer_updated")},
    ("rpc/server.py", "connection_made"): "asyncio's protocol callback",
    ("faults/network.py", "writelines"): "asyncio's transport API, which the shaped transport provides",
    ("faults/client.py", "inject"): "the fault client's context manager, for users' tests (docs/faults.md)",
    **{("faults/pytest_plugin.py", n): "pytest calls it: a hook or fixture of kraftsim's pytest plugin"
       for n in ("pytest_configure", "kraftsim_fleet", "kraftsim_faults")},
    ("rpc/clock.py", "ManualClock"): "the virtual clock of the simulated fleet's --virtual-time and of users' tests",
    ("rpc/clock.py", "sleeping_until"): "the virtual clock's: whether a timer is armed, before a test advances past it",
    ("metadata/log.py", "write_snapshot"): "the log as a library (docs/apis.md): a snapshot of an image in one call",
    ("metadata/log.py", "wait_flushed"): "the log as a library (docs/apis.md): wait for an offset's fsync",
    ("raft/sim/runner.py", "simulate"): "the simulator's one-call entry point (docs/raft-simulator.md, benchmarks)",
    **{("migration/zk_client.py", n): "kazoo's connection calls it on any request object it sends"
       for n in ("serialize", "deserialize")},
    ("rpc/frames.py", "decode_request"): "the codec's entry point for a whole request frame (docs/apis.md)",
    ("rpc/frames.py", "decode_request_header"): "the codec's entry point for a request header (docs/apis.md)",
}


def unused() -> list[tuple[str, str, int, str]]:
    v = vulture.Vulture()
    v.scavenge([str(REPO / p) for p in PACKAGES])
    out = []
    for item in v.get_unused_code(min_confidence=60):
        if item.typ not in KINDS:
            continue
        rel = Path(item.filename).resolve().relative_to(REPO).as_posix()
        out.append((rel, item.name, item.first_lineno, item.typ))
    return out


def test_the_package_holds_no_dead_code_and_nothing_only_tests_use() -> None:
    found = [(f, n, line, typ) for f, n, line, typ in unused() if (f, n) not in USED_WITHOUT_A_NAME]
    assert not found, "unused in the package (dead, or only tests use it: move it into the tests):\n" + "\n".join(
        f"  {f}:{line}: {typ} {n}" for f, n, line, typ in found)


def test_every_listed_exception_is_still_needed() -> None:
    """An entry whose code went away, or which the package now names, is removed from the list."""
    flagged = {(f, n) for f, n, _, _ in unused()}
    stale = sorted(k for k in USED_WITHOUT_A_NAME if k not in flagged)
    assert not stale, f"listed as used without a name, but vulture no longer flags them: {stale}"
