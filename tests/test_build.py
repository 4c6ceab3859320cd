"""The optional mypyc build (`make compiled`) cannot leak into the pure one, and says which runs.

`make test` runs this file twice: on the pure checkout, and on build/compiled with
KRAFTSIM_EXPECT_COMPILED=1 (tests/conftest.py stops that run if the compiled modules were not
the ones imported).
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import kraftsim
from kraftsim.cli.main import build_parser

REPO = Path(__file__).resolve().parent.parent
COMPILED_RUN = os.environ.get("KRAFTSIM_EXPECT_COMPILED") == "1"


def test_no_compiled_module_lies_beside_the_sources() -> None:
    """A mypyc .so next to its .py would shadow it in every pure install from this checkout."""
    roots = [REPO / "kraftsim", REPO / "pyspark_kraft"]
    roots += [p.resolve() for p in (REPO / "kraftsim").iterdir() if p.is_symlink()]  # rpc/, metadata/, ...
    assert len(roots) > 4
    found = [str(p) for root in roots for p in root.rglob("*") if p.name.endswith(tuple(EXTENSION_SUFFIXES))]
    assert found == []


def test_the_version_names_the_build(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--version"])
    out = capsys.readouterr().out.strip()
    if COMPILED_RUN:
        n = len(kraftsim.COMPILED_MODULES)
        assert out == f"{kraftsim.__version__} (compiled with mypyc: {n} of {n} hot modules)"
        assert sorted(kraftsim.compiled_modules()) == sorted(kraftsim.COMPILED_MODULES)
    else:
        assert out == f"{kraftsim.__version__} (pure Python)"
        assert kraftsim.compiled_modules() == []


def test_the_build_falls_back_to_pure_python_in_one_line_without_mypyc(tmp_path: Path) -> None:
    """With no mypyc to import (here a module on PYTHONPATH that refuses to load stands in for
    an install without the dev extra), the build copies the package, compiles nothing, says so
    in one line and succeeds."""
    blocker = tmp_path / "no-mypyc" / "mypyc"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('mypyc is not installed here')\n")
    env = {**os.environ, "PYTHONPATH": str(blocker.parent)}
    assert subprocess.run([sys.executable, "-c", "import mypyc"], env=env, capture_output=True).returncode != 0
    out = tmp_path / "compiled"
    res = subprocess.run([str(REPO / ".ci" / "build-compiled"), sys.executable, str(out)], capture_output=True,
                         text=True, timeout=60, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [f"kraftsim: no mypyc (the dev extra): {out} is pure Python (nothing compiled)"]
    assert (out / "kraftsim" / "metadata" / "image" / "fast_replay.py").is_file()
    assert not (out / ".compiled").exists()
    assert not [p for p in out.rglob("*") if p.name.endswith(tuple(EXTENSION_SUFFIXES))]
