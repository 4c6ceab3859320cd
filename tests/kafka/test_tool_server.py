"""The warm tool JVMs (tests/kafka/tool_server.py) answer as a fresh JVM per tool would: the same
exit code, the same standard output, the same standard error but for where a stack trace ends.
Every other test of Kafka's tools relies on this."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from kraftsim.metadata.log import LogConfig, MetadataLog
from pyspark_kraft.synthetic import Workload
from tests.kafka import tool_server
from tests.kafka.harness import java_command, kafka_topics, run_tool
from tests.kafka.provision import kafka

pytestmark = pytest.mark.kafka


def fresh(*args: str) -> tuple[int, str, str]:
    r = subprocess.run(java_command(kafka(), *args), capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def without_frames(text: str) -> str:
    """A trace printed in the server ends in its own frames, the JVM's own warnings differ, and
    log lines have their times."""
    text = re.sub(r"^\[\d{4}-\d\d-\d\d [\d:,]+\]", "[<time>]", text, flags=re.M)
    return "\n".join(line for line in text.splitlines() if not line.startswith(("\tat ", "\t... ", "OpenJDK")))


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tool-server") / "meta"
    log = MetadataLog.open(d, LogConfig(linger_ms=0))
    w = Workload(log, seed=3, check=True)
    w.run(300)
    log.flush_now()
    assert w.image is not None
    log.write_snapshot(w.image.records(), log.end_offset - 1, w.now, w.now)
    log.close()
    return next(d.rglob("*.checkpoint"))


def test_a_warm_jvm_answers_as_a_fresh_one(tmp_path: Path) -> None:
    cases: list[tuple[str, ...]] = [
        ("kafka.tools.StorageTool", "random-uuid"),  # stdout differs: compared by shape below
        ("org.apache.kafka.tools.TopicCommand", "--version"),
        ("org.apache.kafka.tools.TopicCommand", "--no-such-option"),  # a trace, then exit(1)
        ("kafka.tools.StorageTool", "info", "-c", str(tmp_path / "missing.properties")),  # uncaught
        ("kafka.admin.ConfigCommand", "--help"),  # usage on stderr, exit(1)
        ("kafka.tools.StorageTool", "format", "-t", "x", "-c", str(tmp_path / "missing.properties")),
        ("no.such.Main",),
    ]
    for args in cases:
        code, out, err = fresh(*args)
        warm = run_tool(*args)
        assert warm.returncode == code, (args, warm, err)
        if args[-1] == "random-uuid":
            assert len(warm.stdout.strip()) == len(out.strip()) == 22 and warm.stdout != out
        else:
            assert warm.stdout == out, args
        assert without_frames(warm.stderr) == without_frames(err), args


def test_the_metadata_shell_gets_a_jvm_of_its_own(snapshot: Path) -> None:
    """Its loader at times never catches up in a warm JVM (tool_server.OWN_JVM); in its own it
    prints the snapshot's metadata version."""
    args = ("org.apache.kafka.shell.MetadataShell", "--snapshot", str(snapshot), "cat",
            "/image/features/metadataVersion")
    assert tool_server.run(java_command(kafka(), str(tool_server.SOURCE)), args, 60) is None
    # The 3.9 shell may run its command before its loader has published the whole snapshot
    # (test_files.shell_tree): it then prints the default level, 3.0-IV1. Asked again, with a
    # deadline, until it has read the file.
    deadline = time.monotonic() + 60
    while True:
        r = run_tool(*args)
        assert r.returncode == 0 and r.stdout in ("3.9-IV0\n", "3.0-IV1\n"), r
        if r.stdout == "3.9-IV0\n":
            break
        assert time.monotonic() < deadline, f"the shell never caught up with {snapshot}"


def test_a_tool_past_its_timeout_is_killed_with_its_jvm() -> None:
    """As ``subprocess.run(timeout=...)`` kills its JVM: the server goes, and the next tool gets
    a new one."""
    assert kafka_topics("--version").returncode == 0
    server = tool_server._idle[tuple(java_command(kafka(), str(tool_server.SOURCE)))][-1]  # the next command's
    with pytest.raises(subprocess.TimeoutExpired):
        kafka_topics("--bootstrap-server", "127.0.0.1:9", "--list", timeout=3)
    assert server.proc.poll() is not None and server not in tool_server._all
    assert kafka_topics("--version").returncode == 0


def test_an_argument_with_a_newline_runs_in_a_fresh_jvm() -> None:
    """The server's requests are lines; such a command runs as before, and answers the same."""
    args = ("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", "127.0.0.1:9", "--topic", "a\nb",
            "--describe", "--command-config", "/nonexistent")
    assert tool_server.run(java_command(kafka(), str(tool_server.SOURCE)), args, 60) is None
    code, out, err = fresh(*args)
    warm = run_tool(*args)
    assert (warm.returncode, warm.stdout) == (code, out)


def test_a_tool_that_ends_the_jvm_fails_loudly_and_is_not_run_twice() -> None:
    """javac's main calls System.exit, which no server can survive; it ran once (its side effects
    with it), so it is not run again in a fresh JVM: the test fails and says why."""
    with pytest.raises(AssertionError, match="ended the tool server's JVM"):
        run_tool("com.sun.tools.javac.Main")
    assert kafka_topics("--version").returncode == 0
