"""docs/spark.md's "Any SparkSession" example, run exactly as written in a fresh interpreter of
the project's venv: a plain SparkSession, no PYSPARK_PYTHON, no PYTHONPATH, the venv not on
PATH, run from outside the checkout (whose root would otherwise be on the workers' path)."""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

from pyspark_kraft.editable import PTH_NAME
from tests.spark.conftest import JDK17
from tests.spark.reference import read_log

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "spark.md"
DOC_LOG = "/tmp/kraft-demo/meta"


def _example() -> str:
    text = DOC.read_text()
    section = text.split("## Any SparkSession", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None, "docs/spark.md: no python block under 'Any SparkSession'"
    return found.group(1)


def test_the_docs_plain_session_example_runs_as_written(small_log: Path, tmp_path: Path) -> None:
    code = _example()
    assert "SparkSession.builder" in code and "pyspark_kraft" not in code  # a plain session
    assert DOC_LOG in code
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "VIRTUAL_ENV", "SPARK_HOME")}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"  # loopback only, as every test here
    if "JAVA_HOME" not in env and JDK17.is_dir():
        env["JAVA_HOME"] = str(JDK17)
    run = subprocess.run([sys.executable, "-c", code.replace(DOC_LOG, str(small_log))], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    hint = "" if (Path(sysconfig.get_paths()["purelib"]) / PTH_NAME).exists() else (
        f"(no {PTH_NAME} in this venv: run `.venv/bin/python -m pyspark_kraft.editable`, as make does)\n")
    assert run.returncode == 0, hint + "\n".join(line for line in run.stderr.splitlines()
                                                 if "Error" in line or "Exception" in line or "NOT_FOUND" in line)[:3000]
    shown = dict(re.findall(r"^\|\s*([\w.]+)\|\s*(\d+)\|$", run.stdout, re.M))
    want = collections.Counter(r.record_type for r in read_log(small_log))
    # show() cuts a value longer than 20 characters to its first 17 and "..."
    names = {k: "NULL" if k is None else k if len(k) <= 20 else k[:17] + "..." for k in want}
    assert {k: int(v) for k, v in shown.items()} == {names[k]: v for k, v in want.items()}
