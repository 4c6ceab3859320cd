"""``kraftsim features`` over real loopback sockets against an in-process Kafka server.

The server is the project's own ``KafkaServer`` with the FeatureControlManager as its feature
source and an UpdateFeatures handler that does what the controller core does (append = replay at
the next offsets). The CLI runs in a worker thread (and once as ``python -m``), so the server's
event loop keeps serving while the tool blocks, and the printed lines are asserted verbatim
against kafka-features.sh 3.9's format.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest

from kraftsim.cli import features as features_cli
from kraftsim.cli.features import main
from kraftsim.controller.managers.features import FeatureControlManager
from kraftsim.rpc import registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.dispatch import Dispatcher, RequestContext
from kraftsim.rpc.message import Message
from kraftsim.rpc.messages import UpdateFeaturesRequest, UpdateFeaturesResponse
from kraftsim.rpc.server import KafkaServer
from tests.test_features_manager import FULL, KV, MV, NODE, apply, broker, feature, manager, mv

ROOT = Path(__file__).resolve().parent.parent


class Controller:
    """A server plus the manager behind it; ``addr`` is what the CLI gets as H:P."""

    def __init__(self, server: KafkaServer, manager: FeatureControlManager) -> None:
        self.server = server
        self.manager = manager
        self.requests: list[tuple[int, Message]] = []

    @property
    def addr(self) -> str:
        return f"{self.server.host}:{self.server.port}"

    @property
    def image(self):  # type: ignore[no-untyped-def]
        return self.manager.ctx.image


async def start(records: Iterable[Message], cfg: dict[str, str] | None = None) -> Controller:
    m = manager(list(records), cfg=cfg)
    d = Dispatcher()
    d.features = m
    server = KafkaServer(d, "127.0.0.1", 0)
    ctl = Controller(server, m)

    def update_features(rc: RequestContext, req: UpdateFeaturesRequest) -> UpdateFeaturesResponse:
        ctl.requests.append((rc.api_version, req))
        res = m.update_features(req, rc)
        apply(m, res)  # the controller's write path
        assert res.response is not None
        return res.response

    d.register(Api.UPDATE_FEATURES, update_features)
    await server.start()
    return ctl


@pytest.fixture
async def ctl() -> AsyncIterator[Controller]:
    c = await start([mv(20), broker(1, FULL), broker(2, FULL)])
    try:
        yield c
    finally:
        await c.server.stop()


async def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], list[str]]:
    """Run the CLI in a thread; (status, stdout lines, stderr lines)."""
    capsys.readouterr()
    rc = await asyncio.to_thread(main, argv)
    out, err = capsys.readouterr()
    return rc, out.splitlines(), err.splitlines()


def describe_line(name: str, lo: str, hi: str, fin: str, epoch: int | str) -> str:
    return (f"Feature: {name}\tSupportedMinVersion: {lo}\tSupportedMaxVersion: {hi}\t"
            f"FinalizedVersionLevel: {fin}\tEpoch: {epoch}")


# ----- describe -------------------------------------------------------------------------------

async def test_describe(ctl: Controller, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = await run(["--bootstrap-controller", ctl.addr, "describe"], capsys)
    assert (rc, err) == (0, [])
    # kraft.version's range starts at 0: listed because describe uses ApiVersions v4.
    assert out == [
        describe_line(KV, "0", "1", "0", 3),
        describe_line(MV, "3.0-IV1", "3.9-IV0", "3.8-IV0", 3),
    ]


async def test_describe_after_changes_and_bootstrap_server_flag(capsys: pytest.CaptureFixture[str]) -> None:
    c = await start([mv(21), feature(KV, 1)])
    try:
        rc, out, _ = await run(["--bootstrap-server", c.addr, "describe"], capsys)
        assert rc == 0
        assert out == [describe_line(KV, "0", "1", "1", 2), describe_line(MV, "3.0-IV1", "3.9-IV0", "3.9-IV0", 2)]
        # The flag is also accepted after the sub-command.
        rc, out2, _ = await run(["describe", "--bootstrap-controller", c.addr], capsys)
        assert (rc, out2) == (0, out)
    finally:
        await c.server.stop()


def test_format_describe_unknown_levels_and_missing_epoch() -> None:
    from kraftsim.rpc import registry

    cls = registry.response_class(ApiKey.API_VERSIONS)
    resp = cls(supported_features=[cls.SupportedFeatureKey(name=MV, min_version=1, max_version=40),
                                   cls.SupportedFeatureKey(name="a.feature", min_version=1, max_version=3)],
               finalized_features=[cls.FinalizedFeatureKey(name="not.supported", min_version_level=1,
                                                           max_version_level=1)],
               finalized_features_epoch=-1)
    # Sorted by name; only supported features are listed; an unfinalized MV is "UNKNOWN 0".
    assert features_cli.format_describe(resp) == [
        describe_line("a.feature", "1", "3", "0", "-"),
        describe_line(MV, "3.0-IV1", "UNKNOWN 40", "UNKNOWN 0", "-"),
    ]


# ----- upgrade / downgrade / disable ------------------------------------------------------------

async def test_upgrade_metadata(ctl: Controller, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = await run(["--bootstrap-controller", ctl.addr, "upgrade", "--metadata", "3.9"], capsys)
    assert (rc, out, err) == (0, ["metadata.version was upgraded to 21."], [])
    assert ctl.image.metadata_version == 21
    version, req = ctl.requests[-1]
    assert version == 1 and req.validate_only is False
    assert [(u.feature, u.max_version_level, u.upgrade_type) for u in req.feature_updates] == [(MV, 21, 1)]


async def test_upgrade_release_version_alias_and_feature_flag(ctl: Controller,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = await run(["--bootstrap-controller", ctl.addr, "upgrade", "--release-version", "3.9-IV0",
                            "--feature", "kraft.version=1"], capsys)
    assert (rc, out) == (0, ["kraft.version was upgraded to 1.", "metadata.version was upgraded to 21."])
    assert ctl.image.features.all_levels() == {MV: 21, KV: 1}


async def test_partial_failure(ctl: Controller, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = await run(["--bootstrap-controller", ctl.addr, "upgrade",
                              "--feature", "metadata.version=21", "--feature", "kraft.version=2"], capsys)
    assert rc == 1
    assert out == [
        "Could not upgrade kraft.version to 2. Invalid update version 2 for feature kraft.version. "
        f"Local controller {NODE} only supports versions 0-1",
        "metadata.version was upgraded to 21.",
    ]
    assert err == ["1 out of 2 operation(s) failed."]
    assert ctl.image.metadata_version == 21  # the good half was applied


async def test_dry_run(ctl: Controller, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = await run(["--bootstrap-controller", ctl.addr, "downgrade", "--metadata", "3.7-IV4",
                            "--dry-run"], capsys)
    assert (rc, out) == (0, ["metadata.version can be downgraded to 19."])
    assert ctl.requests[-1][1].validate_only is True
    assert ctl.requests[-1][1].feature_updates[0].upgrade_type == 2
    rc, out, err = await run(["--bootstrap-controller", ctl.addr, "upgrade", "--metadata", "3.9", "--dry-run",
                              "--feature", "kraft.version=7"], capsys)
    assert rc == 1
    assert out == ["Can not upgrade kraft.version to 7. Invalid update version 7 for feature kraft.version. "
                   f"Local controller {NODE} only supports versions 0-1",
                   "metadata.version can be upgraded to 21."]
    assert err == ["1 out of 2 operation(s) failed."]
    assert ctl.image.metadata_version == 20


async def test_downgrade_refused_safe_and_unsafe(ctl: Controller, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--bootstrap-controller", ctl.addr, "downgrade", "--metadata", "3.6"]
    rc, out, err = await run(base, capsys)
    assert rc == 1
    assert out == ["Could not downgrade metadata.version to 14. Invalid metadata.version 14. Refusing to "
                   "perform the requested downgrade because it might delete metadata information."]
    assert err == ["1 out of 1 operation(s) failed."]
    rc, out, _ = await run(base + ["--unsafe"], capsys)
    assert ctl.requests[-1][1].feature_updates[0].upgrade_type == 3
    assert out == ["Could not downgrade metadata.version to 14. Invalid metadata.version 14. "
                   "Unsafe metadata downgrade is not supported in this version."]


async def test_downgrade_without_metadata_change(ctl: Controller, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = await run(["--bootstrap-controller", ctl.addr, "downgrade", "--feature", "metadata.version=18"],
                           capsys)
    assert (rc, out) == (0, ["metadata.version was downgraded to 18."])
    assert ctl.image.metadata_version == 18


async def test_disable(capsys: pytest.CaptureFixture[str]) -> None:
    c = await start([mv(21), feature(KV, 1)])
    try:
        rc, out, _ = await run(["--bootstrap-controller", c.addr, "disable", "--feature", "kraft.version",
                                "--dry-run"], capsys)
        assert (rc, out) == (0, ["kraft.version can be disabled."])
        rc, out, _ = await run(["--bootstrap-controller", c.addr, "disable", "--feature", "kraft.version"],
                               capsys)
        assert (rc, out) == (0, ["kraft.version was disabled."])
        assert c.image.features.all_levels() == {MV: 21}
        assert [(u.max_version_level, u.upgrade_type) for u in c.requests[-1][1].feature_updates] == [(0, 2)]
        rc, out, _ = await run(["--bootstrap-controller", c.addr, "disable", "--feature", "metadata.version"],
                               capsys)
        assert rc == 1
        assert out == ["Could not disable metadata.version. Invalid update version 0 for feature "
                       f"metadata.version. Local controller {NODE} only supports versions 1-21"]
    finally:
        await c.server.stop()


# ----- failures: one stderr line, non-zero status ------------------------------------------------

async def test_connection_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # A port that was just free: bind, read the port, close.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, out, err = await run(["--bootstrap-controller", f"127.0.0.1:{port}", "describe"], capsys)
    assert (rc, out) == (1, [])
    assert err == [f"Could not connect to 127.0.0.1:{port}: Connection refused"]


async def test_second_bootstrap_address_is_tried(ctl: Controller, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    rc, out, _ = await run(["--bootstrap-controller", f"127.0.0.1:{dead},{ctl.addr}", "describe"], capsys)
    assert rc == 0 and len(out) == 2


@pytest.mark.parametrize("argv, message", [
    (["describe"], "kraftsim features: one of the arguments --bootstrap-server --bootstrap-controller is required"),
    (["--bootstrap-controller", "x:1", "--bootstrap-server", "x:1", "describe"],
     "kraftsim features: argument --bootstrap-server: not allowed with argument --bootstrap-controller"),
    (["--bootstrap-controller", "nohost", "describe"],
     "kraftsim features: invalid bootstrap address 'nohost' (expected host:port)"),
    (["--bootstrap-controller", "h:1"], None),
    (["--bootstrap-controller", "h:1", "upgrade"], "You must specify at least one feature to upgrade"),
    (["--bootstrap-controller", "h:1", "disable"], "You must specify at least one feature to disable"),
    (["--bootstrap-controller", "h:1", "upgrade", "--feature", "kraft.version"],
     "Can't parse feature=level string kraft.version: equals sign not found."),
    (["--bootstrap-controller", "h:1", "upgrade", "--feature", "kraft.version=one"],
     "Can't parse feature=level string kraft.version=one: unable to parse one as a short."),
    (["--bootstrap-controller", "h:1", "upgrade", "--feature", "kraft.version=40000"],
     "Can't parse feature=level string kraft.version=40000: unable to parse 40000 as a short."),
    (["--bootstrap-controller", "h:1", "upgrade", "--metadata", "3.9", "--feature", "metadata.version=21"],
     "Feature metadata.version was specified more than once."),
    (["--bootstrap-controller", "h:1", "disable", "--feature", "a", "--feature", "a"],
     "Feature a was specified more than once."),
    (["--bootstrap-controller", "h:1", "upgrade", "--metadata", "9.9"],
     "Unsupported metadata.version 9.9. Supported metadata.version are 3.3-IV0, 3.3-IV1, 3.3-IV2, "
     "3.3-IV3, 3.4-IV0, 3.5-IV0, 3.5-IV1, 3.5-IV2, 3.6-IV0, 3.6-IV1, 3.6-IV2, 3.7-IV0, 3.7-IV1, 3.7-IV2, "
     "3.7-IV3, 3.7-IV4, 3.8-IV0, 3.9-IV0"),
    (["--bootstrap-controller", "h:1", "upgrade", "--unsafe", "--metadata", "3.9"], None),
    (["--bootstrap-controller", "no-such-host.invalid:1", "describe"], None),
    (["--bootstrap-controller", "h:1", "upgrade", "--metadata", "3.9", "--release-version", "3.9"], None),
])
def test_bad_input_is_one_stderr_line(argv: list[str], message: str | None,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc != 0 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    if message is not None:
        assert lines[0] == message


def test_parse_metadata_version_like_from_version_string() -> None:
    assert features_cli.parse_metadata_version("3.9") == 21
    assert features_cli.parse_metadata_version("3.9.1") == 21
    assert features_cli.parse_metadata_version("3.7") == 19
    assert features_cli.parse_metadata_version("3.3-IV3") == 7
    assert features_cli.parse_metadata_version("3.2") == 3  # sent; the controller refuses it
    with pytest.raises(features_cli.CommandError):
        features_cli.parse_metadata_version("4.0")  # unstable in 3.9: not a valid version string


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "describe" in capsys.readouterr().out


# ----- the kraftsim console script wiring and python -m ------------------------------------------

async def test_register_into_a_kraftsim_style_parser(ctl: Controller, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="kraftsim")
    sub = parser.add_subparsers(dest="command", required=True)
    features_cli.register(sub)
    args = parser.parse_args(["features", "--bootstrap-controller", ctl.addr, "upgrade", "--metadata", "3.9"])
    capsys.readouterr()
    rc = await asyncio.to_thread(args.func, args)
    assert (rc, capsys.readouterr().out) == (0, "metadata.version was upgraded to 21.\n")


async def test_python_dash_m(ctl: Controller) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kraftsim.cli.features", "--bootstrap-controller", ctl.addr, "describe",
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err
    assert out.decode().splitlines() == [
        describe_line(KV, "0", "1", "0", 3),
        describe_line(MV, "3.0-IV1", "3.9-IV0", "3.8-IV0", 3),
    ]
    assert err == b""


@pytest.mark.parametrize("enabled", [False, True])
async def test_api_versions_reports_zk_migration_ready_from_the_config(enabled: bool) -> None:
    """ApiVersions v3+ carries ZkMigrationReady (KIP-866) from zookeeper.metadata.migration.enable."""
    # Port 9 (discard): nothing answers, so the migration driver this starts writes to no ZooKeeper.
    cfg = {"zookeeper.metadata.migration.enable": "true", "zookeeper.connect": "127.0.0.1:9"} if enabled else None
    c = await start([mv(21)], cfg)
    try:
        client = await KafkaClient.connect("127.0.0.1", c.server.port)
        try:
            resp = await client.request(registry.request_class(ApiKey.API_VERSIONS)(
                client_software_name="t", client_software_version="1"), 3)
        finally:
            await client.close()
        assert resp.error_code == 0 and resp.zk_migration_ready is enabled
    finally:
        await c.server.stop()
