"""The image's entrypoint, run for real outside a container (this machine has a docker client but
no engine): environment -> server.properties, first-start format, restart without re-format,
SIGTERM -> exit 0, and the HEALTHCHECK probe. The entrypoint is the shipped shell script; the
controller is the installed ``kraftsim``; only the image's directories are moved, through the
variables the script reads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from kraftsim import __version__, build_description
from kraftsim.cli.container import DEFAULT_CLUSTER_ID, properties_from_env, property_name, render
from kraftsim.metadata.files import parse_java_properties
from kraftsim.rpc.uuids import random_uuid, to_str
from tests import harness

REPO = Path(__file__).resolve().parents[1]
ENTRYPOINT = REPO / "deploy" / "docker" / "entrypoint.sh"
BIN = Path(sys.executable).parent


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This process's environment without any KAFKA_/KRAFTSIM_/CLUSTER_ID of its own, the test
    venv first on PATH (as the image's venv is), and the image's directories moved under tmp."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KAFKA_", "KRAFTSIM_")) and k != "CLUSTER_ID"}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", PYTHONUNBUFFERED="1",
               KRAFTSIM_DEFAULT_CONFIG_DIR=str(REPO / "deploy" / "docker"),
               KRAFTSIM_MOUNTED_CONFIG_DIR=str(tmp_path / "mnt"),
               KRAFTSIM_CONFIG_DIR=str(tmp_path / "config"))
    env.update(extra)
    return env


def _setup(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kraftsim.cli.container", "setup"], env=env,
                          capture_output=True, text=True, timeout=60)


def _written(tmp_path: Path) -> dict[str, str]:
    return parse_java_properties((tmp_path / "config" / "server.properties").read_text("latin-1"))


def test_environment_names_map_as_in_the_apache_kafka_image() -> None:
    assert property_name("KAFKA_BROKER_SESSION_TIMEOUT_MS") == "broker.session.timeout.ms"
    assert property_name("KAFKA_NODE_ID") == "node.id"
    assert property_name("KAFKA_CONTROLLER_QUORUM_VOTERS") == "controller.quorum.voters"
    assert property_name("KAFKA_LISTENER_NAME_CONTROLLER_SSL__KEYSTORE___TYPE") == \
        "listener.name.controller.ssl_keystore-type"
    assert property_name("KRAFTSIM_HTTP_LISTEN") == "kraftsim.http.listen"
    for not_a_property in ("KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_JMX_OPTS", "KAFKA_LOG4J_LOGGERS",
                           "KRAFTSIM_CONFIG_DIR", "KRAFTSIM_MOUNTED_CONFIG_DIR", "KRAFTSIM_CODEC_CACHE",
                           "CLUSTER_ID", "KAFKA_",
                           "PATH", "kafka_node_id"):
        assert property_name(not_a_property) is None, not_a_property
    props = properties_from_env({"PATH": "/bin", "KAFKA_Z_Z": "1", "KAFKA_A": "2", "CLUSTER_ID": "x"})
    assert list(props.items()) == [("a", "2"), ("z.z", "1")]  # sorted: the file is stable across starts


def test_written_values_read_back_exactly() -> None:
    values = {"listeners": "CONTROLLER://0.0.0.0:9093", "a.path": "C:\\kafka\\data", "two.lines": "x\ny",
              "lead": " spaced", "hash": "#not a comment", "latin": "Zürich ±", "greek": "Ωμέγα",
              "sasl.jaas.config": 'org.example.Plain required username="u" password="p=q:r";'}
    text = render(values, ["test"])
    assert "listeners=CONTROLLER://0.0.0.0:9093\n" in text  # readable, not Properties.store's \:
    text.encode("latin-1")  # the controller reads the file as latin-1
    assert parse_java_properties(text) == values


def test_setup_layers_mounted_file_and_environment(tmp_path: Path) -> None:
    data = tmp_path / "data"
    # No mounted file: the image defaults, with the environment over single keys.
    r = _setup(_env(tmp_path, KAFKA_LOG_DIRS=str(data), KAFKA_BROKER_SESSION_TIMEOUT_MS="12000",
                    KAFKA_HEAP_OPTS="-Xmx1g", CLUSTER_ID="MkU3OEVBNTcwNTJENDM2Qg"))
    assert r.returncode == 0, r.stderr
    props = _written(tmp_path)
    assert props["broker.session.timeout.ms"] == "12000"
    assert props["log.dirs"] == str(data)
    assert props["listeners"] == "CONTROLLER://0.0.0.0:9093"  # from the image defaults
    assert not any("heap" in k for k in props)
    assert (data / "meta.properties").is_file() and (data / "bootstrap.checkpoint").is_file()
    assert f"Formatting metadata directory {data}" in r.stdout

    # A mounted server.properties replaces the defaults; the environment still wins over it.
    (tmp_path / "mnt").mkdir()
    (tmp_path / "mnt" / "server.properties").write_text(
        f"process.roles=controller\nnode.id=5\ncontroller.quorum.voters=5@kraft:9093\n"
        f"listeners=CONTROLLER://127.0.0.1:9093\nlog.dirs={data}\nnum.partitions=3\n")
    r = _setup(_env(tmp_path, KAFKA_NUM_PARTITIONS="6", CLUSTER_ID="MkU3OEVBNTcwNTJENDM2Qg"))
    assert r.returncode == 0, r.stderr
    props = _written(tmp_path)
    assert props["num.partitions"] == "6" and props["node.id"] == "5"
    assert "kraftsim.http.listen" not in props  # the defaults file was not used
    assert "All of the log directories are already formatted." in r.stdout


def test_setup_refuses_bad_input_with_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    cases = [
        ({"KAFKA_PROCESS_ROLES": "controller", "KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://h:9092"},
         "KAFKA_ADVERTISED_LISTENERS is not supported on a KRaft controller."),
        ({"KAFKA_BROKER_SESSION_TIMEOUT_MS": "soon"}, "broker.session.timeout.ms"),
        ({"KAFKA_PROCESS_ROLES": "broker,controller"}, "process.roles"),
        ({"KAFKA_NODE_ID": "2"}, "controller.quorum.voters does not contain node.id 2"),
        ({"CLUSTER_ID": "not-a-uuid"}, "does not appear to be a valid UUID"),
    ]
    for env, message in cases:
        r = _setup(_env(tmp_path, KAFKA_LOG_DIRS=str(data), **env))
        assert r.returncode == 1, (env, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (env, r.stderr)
        assert "Traceback" not in r.stderr
        assert not (data / "meta.properties").exists()


def _start(tmp_path: Path, env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    with log.open("a") as out:
        return subprocess.Popen([str(ENTRYPOINT)], env=env, stdout=out, stderr=subprocess.STDOUT, text=True)


def _healthcheck(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The image's HEALTHCHECK command, as docker runs it."""
    return subprocess.run(["python", "-m", "kraftsim.cli.container", "healthcheck"], env=env,
                          capture_output=True, text=True, timeout=30)


def _stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGTERM)  # docker stop: SIGTERM to PID 1, the exec'd controller
    return proc.wait(timeout=30)


def test_entrypoint_first_start_restart_and_sigterm(tmp_path: Path) -> None:
    port, http_port = harness.free_port(), harness.free_port()
    data, log = tmp_path / "data", tmp_path / "entrypoint.log"
    cluster_id = to_str(random_uuid())
    env = _env(tmp_path, CLUSTER_ID=cluster_id, KAFKA_NODE_ID="7", KAFKA_PROCESS_ROLES="controller",
               KAFKA_CONTROLLER_QUORUM_VOTERS=f"7@127.0.0.1:{port}",
               KAFKA_LISTENERS=f"CONTROLLER://127.0.0.1:{port}", KAFKA_LOG_DIRS=str(data),
               KAFKA_BROKER_SESSION_TIMEOUT_MS="12000", KRAFTSIM_HTTP_LISTEN=f"127.0.0.1:{http_port}",
               KAFKA_NO_SUCH_KEY="1")

    # First start: formats, then serves; the HEALTHCHECK probe follows it from 503 to 200.
    proc = _start(tmp_path, env, log)
    try:
        body = json.loads(harness.wait_http(http_port))
        assert (body["status"], body["nodeId"], body["clusterId"]) == ("active", 7, cluster_id)
        probe = _healthcheck(env)
        assert probe.returncode == 0 and json.loads(probe.stdout)["status"] == "active", probe.stderr
    finally:
        rc = _stop(proc)
    text = log.read_text()
    assert rc == 0, text
    assert f"Formatting metadata directory {data} with metadata.version 3.9-IV0." in text
    assert "shut down cleanly" in text
    assert text.count("supplied but isn't a known config") == 1  # the controller's warning, not setup's too
    assert "The configuration 'no.such.key' was supplied" in text
    assert _written(tmp_path)["broker.session.timeout.ms"] == "12000"
    meta = (data / "meta.properties").read_bytes()
    assert f"cluster.id={cluster_id}".encode() in meta
    committed = body["committedOffset"]

    probe = _healthcheck(env)
    assert probe.returncode == 1 and len(probe.stderr.strip().splitlines()) == 1, probe.stderr

    # Restart over the same data dir, this time without CLUSTER_ID: no re-format (meta.properties,
    # with its random directory.id, is byte for byte the same), the log is replayed, the formatted
    # cluster id is kept, and the entrypoint says why the default id is not used.
    log2 = tmp_path / "restart.log"
    env2 = {k: v for k, v in env.items() if k != "CLUSTER_ID"}
    proc = _start(tmp_path, env2, log2)
    try:
        body = json.loads(harness.wait_http(http_port))
        assert body["clusterId"] == cluster_id
        assert body["committedOffset"] > committed
    finally:
        rc = _stop(proc)
    text = log2.read_text()
    assert rc == 0, text
    assert "All of the log directories are already formatted." in text
    assert f"CLUSTER_ID={DEFAULT_CLUSTER_ID} is ignored" in text
    assert "Formatting" not in text
    assert (data / "meta.properties").read_bytes() == meta


def test_entrypoint_takes_assignments_and_runs_other_commands(tmp_path: Path) -> None:
    env = _env(tmp_path)
    r = subprocess.run([str(ENTRYPOINT), "GREETING=hello world", "sh", "-c", 'echo "$GREETING"'],
                       env=env, capture_output=True, text=True, timeout=30)
    assert (r.returncode, r.stdout) == (0, "hello world\n"), r.stderr
    r = subprocess.run([str(ENTRYPOINT), "kraftsim", "--version"], env=env, capture_output=True, text=True,
                       timeout=30)
    assert (r.returncode, r.stdout.strip()) == (0, f"{__version__} ({build_description()})"), r.stderr
    assert not (tmp_path / "config").exists()  # no setup, no format for a one-off command


def test_entrypoint_fails_fast_with_one_line_on_bad_config(tmp_path: Path) -> None:
    env = _env(tmp_path, KAFKA_LOG_DIRS=str(tmp_path / "data"), KAFKA_NUM_PARTITIONS="0")
    r = subprocess.run([str(ENTRYPOINT)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "kraftsim setup: Invalid value '0' for configuration num.partitions: must be at least 1"]
    assert "===> Launching" not in r.stdout
