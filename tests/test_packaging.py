"""What users install: ``python -m build`` makes an sdist and a wheel; the wheel, in a clean venv
and away from the checkout, runs ``kraftsim --version`` and a controller that formats, becomes
healthy, serves the protocol, writes a log its own ``dump-log`` decodes, and exits 0 on SIGTERM.
The build runs on a copy of exactly what .dockerignore lets into the image's build stage, so it
also proves that context is enough (and leaves no build output in the checkout). Needs PyPI
(the build backend and the runtime dependencies), as ``make test`` does anyway."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from kraftsim import __version__
from kraftsim.rpc.client import KafkaClient
from tests import harness

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _run(*cmd: str | Path, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{cmd}: {r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


def _schemas() -> set[str]:
    return {f"kraftsim/{p.relative_to(REPO).as_posix()}" for folder in ("rpc/schemas", "metadata/schemas")
            for p in (REPO / folder).rglob("*.json")}


def _docker_context(dest: Path) -> Path:
    """The files .dockerignore's allow-list (``*``, then ``!path`` lines) sends to docker build."""
    for line in (REPO / ".dockerignore").read_text().splitlines():
        if line.startswith("!"):
            src, dst = REPO / line[1:], dest / line[1:]
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            elif src.exists():
                shutil.copy2(src, dst)
    return dest


def test_build_then_run_the_wheel_in_a_clean_venv(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    context = _docker_context(tmp_path / "context")
    _run(sys.executable, "-m", "build", "--outdir", dist, context, cwd=context)
    (sdist,) = dist.glob("kraftsim-*.tar.gz")
    (wheel,) = dist.glob("kraftsim-*.whl")
    assert sdist.name == f"kraftsim-{__version__}.tar.gz"
    assert wheel.name == f"kraftsim-{__version__}-py3-none-any.whl"

    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    assert {"pyproject.toml", "README.md", "CHANGELOG.md"} <= names
    assert _schemas() <= names
    assert not any(n.startswith((".venv/", "kraft-data/", ".git/")) for n in names)

    with zipfile.ZipFile(wheel) as zf:
        files = set(zf.namelist())
        meta = zf.read(f"kraftsim-{__version__}.dist-info/METADATA").decode()
        entry_points = zf.read(f"kraftsim-{__version__}.dist-info/entry_points.txt").decode()
    tops = {f.split("/")[0] for f in files if not f.split("/")[0].endswith(".dist-info")}
    assert "kraftsim" in tops and tops <= {"kraftsim", "pyspark_kraft"}, tops
    assert _schemas() <= files, sorted(_schemas() - files)[:5]
    assert f"\nVersion: {__version__}\n" in meta
    assert "kraftsim = kraftsim.cli.main:main" in entry_points

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    bin_ = venv / "bin"
    _run(bin_ / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel, cwd=tmp_path)
    assert _run(bin_ / "kraftsim", "--version", cwd=tmp_path).stdout.strip() == f"{__version__} (pure Python)"
    where = _run(bin_ / "python", "-c", "import kraftsim; print(kraftsim.__file__)", cwd=tmp_path).stdout.strip()
    assert Path(where).is_relative_to(venv), where  # the installed copy, not this checkout

    port, http_port = harness.free_port(), harness.free_port()
    cfg = harness.write_config(tmp_path, port=port, http_port=http_port)
    cluster_id = _run(bin_ / "kraftsim", "random-uuid", cwd=tmp_path).stdout.strip()
    formatted = _run(bin_ / "kraftsim", "format", "-t", cluster_id, "-c", cfg, cwd=tmp_path).stdout
    assert "with metadata.version 3.9-IV0" in formatted
    with (tmp_path / "controller.out").open("w") as out:
        proc = subprocess.Popen([str(bin_ / "kraftsim"), "controller", str(cfg)], cwd=tmp_path, stdout=out,
                                stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert f'"clusterId": "{cluster_id}"' in harness.wait_http(http_port)
        assert "kafka_controller_kafkacontroller_activecontrollercount 1.0" in harness.wait_http(http_port, "/metrics")

        async def api_versions() -> set[int]:
            c = await KafkaClient.connect("127.0.0.1", port)
            try:
                resp: Any = await c.negotiate()
                return {k.api_key for k in resp.api_keys}
            finally:
                await c.close()

        assert {18, 62, 63, 19, 57} <= asyncio.run(api_versions())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    log = (tmp_path / "controller.out").read_text()
    assert proc.returncode == 0 and "shut down cleanly" in log, log[-3000:]

    segment = tmp_path / "data" / "__cluster_metadata-0" / "00000000000000000000.log"
    dumped = _run(bin_ / "kraftsim", "dump-log", segment, cwd=tmp_path).stdout
    assert "FeatureLevelRecord" in dumped and "metadata.version" in dumped
