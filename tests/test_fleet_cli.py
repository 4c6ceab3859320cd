"""``kraftsim brokers``' command line: bad input is one line on stderr and a non-zero status,
never a traceback."""

from __future__ import annotations

import pytest

from tests import harness


@pytest.mark.parametrize(("args", "message"), [
    (["--zk-mode"], "--zk-mode and --zookeeper go together"),
    (["--zookeeper", "127.0.0.1:2181"], "--zk-mode and --zookeeper go together"),
    (["--features", "metadata.version=21"], "invalid --features 'metadata.version=21'"),
    (["--features", "x=3-1"], "invalid --features 'x=3-1'"),
    (["--listen", "nowhere"], "invalid --listen 'nowhere'"),
    (["--override", "log.dirs=/tmp"], "unknown --override 'log.dirs=/tmp'"),
    (["--override", "broker.heartbeat.interval.ms=soon"], "invalid value 'soon' for broker.heartbeat.interval.ms"),
    (["--override", "broker.heartbeat.interval.ms=9000"], "broker.session.timeout.ms must be greater"),
    (["--kill", "11"], "--kill must be between 0 and --count"),
    (["--log-dirs", "0"], "--log-dirs must be at least 1"),
    (["--racks", "a,,b"], "invalid --racks 'a,,b'"),
])
def test_bad_input_is_one_line_and_status_2(args: list[str], message: str) -> None:
    r = harness.kraftsim("brokers", "--bootstrap-controller", "127.0.0.1:9", "--count", "10", *args)
    assert r.returncode == 2, r
    assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_an_unreachable_controller_without_a_cluster_id_is_one_line() -> None:
    port = harness.free_port()
    r = harness.kraftsim("brokers", "--bootstrap-controller", f"127.0.0.1:{port}", "--count", "1")
    assert r.returncode == 1, r
    assert r.stderr.startswith(f"kraftsim brokers: cannot connect to 127.0.0.1:{port}") and r.stderr.count("\n") == 1
