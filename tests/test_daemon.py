"""`kraftsim` as a user runs it: subprocesses, signals, exit codes, one-line errors."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.loader import load_image
from kraftsim.metadata.log import LogConfig, MetadataLog
from kraftsim.rpc import registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.client import KafkaClient
from tests import harness


def _start(tmp_path: Path) -> tuple[Path, int, int, str, object]:
    port, http_port = harness.free_port(), harness.free_port()
    cfg = harness.write_config(tmp_path, port=port, http_port=http_port)
    cid = harness.format_dir(cfg)
    proc = harness.spawn_controller(cfg)
    try:
        harness.wait_http(http_port)
    except AssertionError:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"controller did not start: {harness.controller_output(cfg)[1][-2000:]}") from None
    return cfg, port, http_port, cid, proc


def test_new_user_path_describe_metrics_and_clean_shutdown(tmp_path: Path) -> None:
    cfg, port, http_port, _, proc = _start(tmp_path)
    try:
        r = harness.kraftsim("features", "--bootstrap-controller", f"127.0.0.1:{port}", "describe")
        assert r.returncode == 0, r.stderr
        assert "Feature: metadata.version\tSupportedMinVersion: 3.0-IV1\tSupportedMaxVersion: 3.9-IV0\t" \
               "FinalizedVersionLevel: 3.9-IV0\t" in r.stdout
        metrics = harness.wait_http(http_port, "/metrics")
        assert "kafka_controller_kafkacontroller_activecontrollercount 1.0" in metrics
        assert "kafka_controller_kafkacontroller_globalpartitioncount 0.0" in metrics
    finally:
        harness.stop(proc)
    out, err = harness.controller_output(cfg)
    assert proc.returncode == 0, err
    assert "shut down cleanly" in out


def test_sigkill_right_after_acknowledgement_loses_nothing(tmp_path: Path) -> None:
    cfg, port, _, cid, proc = _start(tmp_path)
    reg = registry.request_class(ApiKey.BROKER_REGISTRATION)
    hb = registry.request_class(ApiKey.BROKER_HEARTBEAT)
    ct = registry.request_class(ApiKey.CREATE_TOPICS)

    async def work() -> dict[int, int]:
        c = await KafkaClient.connect("127.0.0.1", port)
        epochs = {}
        for b in range(1, 6):
            r = await c.request(reg(broker_id=b, cluster_id=cid, incarnation_id=uuid.uuid4(),
                                    listeners=[reg.Listener(name="PLAINTEXT", host="h", port=9092, security_protocol=0)],
                                    features=[reg.Feature(name="metadata.version", min_supported_version=7,
                                                          max_supported_version=21)],
                                    log_dirs=[uuid.uuid4()]), 3)
            assert r.error_code == 0
            epochs[b] = r.broker_epoch
            r = await c.request(hb(broker_id=b, broker_epoch=r.broker_epoch, current_metadata_offset=10**6), 1)
            assert r.is_fenced is False
        futs = [c.send(ct(topics=[ct.CreatableTopic(name=f"t{i}", num_partitions=2, replication_factor=3)],
                          timeout_ms=10000), 7) for i in range(20)]
        for r in await asyncio.gather(*futs):
            assert r.topics[0].error_code == 0
        return epochs

    try:
        epochs = asyncio.run(work())
    finally:
        proc.kill()  # SIGKILL, right after the last acknowledgement
        proc.communicate(timeout=30)
    mlog = MetadataLog.open(tmp_path / "data", LogConfig(linger_ms=0))
    image, _ = load_image(mlog, MetadataImage)
    mlog.close()
    assert {b: image.cluster.brokers[b].epoch for b in epochs} == epochs
    assert all(not image.cluster.brokers[b].fenced for b in epochs)
    assert {f"t{i}" for i in range(20)} <= set(image.topics.by_name)
    # And the controller starts again on those files.
    proc2 = harness.spawn_controller(cfg)
    try:
        harness.wait_http(int(cfg.read_text().split("kraftsim.http.listen=127.0.0.1:")[1].split()[0]))
    finally:
        harness.stop(proc2)
    assert proc2.returncode == 0


def test_invalid_config_value_is_one_line_naming_the_key(tmp_path: Path) -> None:
    cfg = harness.write_config(tmp_path)
    harness.format_dir(cfg)
    r = harness.kraftsim("controller", str(cfg), "--override", "broker.session.timeout.ms=soon")
    assert r.returncode != 0
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and "broker.session.timeout.ms" in err[0], r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_unknown_key_warns_naming_it(tmp_path: Path) -> None:
    port, http_port = harness.free_port(), harness.free_port()
    cfg = harness.write_config(tmp_path, port=port, http_port=http_port, **{"no_such_key": "1"})
    harness.format_dir(cfg)
    proc = harness.spawn_controller(cfg)
    try:
        harness.wait_http(http_port)
    finally:
        harness.stop(proc)
    out, _ = harness.controller_output(cfg)
    assert "The configuration 'no.such.key' was supplied but isn't a known config." in out


def test_unformatted_directory_and_missing_file_are_one_line_errors(tmp_path: Path) -> None:
    cfg = harness.write_config(tmp_path)
    r = harness.kraftsim("controller", str(cfg))
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "meta.properties" in r.stderr
    r = harness.kraftsim("controller", str(tmp_path / "missing.properties"))
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "missing.properties" in r.stderr
    r = harness.kraftsim("format", "-t", "nope", "-c", str(cfg))
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    r = harness.kraftsim("format", "-t", "MkU3OEVBNTcwNTJENDM2Qk", "-c", str(cfg), "--release-version", "3.2")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    assert "Bootstrap metadata.version before 3.3-IV0 are not supported" in r.stderr  # Kafka 3.9's words
    r = harness.kraftsim("dump-log", str(cfg))
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""


def test_format_twice_needs_ignore_formatted(tmp_path: Path) -> None:
    cfg = harness.write_config(tmp_path)
    cid = "MkU3OEVBNTcwNTJENDM2Qk"
    r = harness.kraftsim("format", "-t", cid, "-c", str(cfg), "--release-version", "3.8")
    assert r.returncode == 0 and "3.8-IV0" in r.stdout
    r = harness.kraftsim("format", "-t", cid, "-c", str(cfg))
    assert r.returncode == 1 and "--ignore-formatted" in r.stderr
    r = harness.kraftsim("format", "-t", cid, "-c", str(cfg), "--ignore-formatted")
    assert r.returncode == 0
    r = harness.kraftsim("dump-log", "--json", str(tmp_path / "data" / "bootstrap.checkpoint"))
    import json

    docs = [json.loads(line) for line in r.stdout.splitlines()]
    levels = [d["record"]["data"]["featureLevel"] for d in docs if "record" in d and "recordType" in d["record"]]
    assert levels == [20]
