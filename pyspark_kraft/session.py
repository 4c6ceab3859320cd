"""A SparkSession for the ``kraftsim spark`` tools, the tests and the benchmark.

The settings that keep Spark working on a plain machine: Python workers run this interpreter
(which has pyarrow and this package) unless ``PYSPARK_PYTHON`` says otherwise, the driver binds
to loopback unless the user configured otherwise, and, on a local master, Python workers can
import ``pyspark_kraft`` by its top-level name even from an editable install (whose import hook
``pkgutil.iter_modules`` cannot see, and Spark's data source lookup uses exactly that): the
directory holding the package goes onto the workers' ``PYTHONPATH``. With a wheel install that
directory is site-packages, already there. On a cluster the executors' interpreter
(``PYSPARK_PYTHON``) must have the wheel installed (docs/spark.md): the checkout is not put on
any path there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pyspark_kraft


def package_root() -> str:
    """The sys.path entry under which ``pyspark_kraft`` is importable."""
    return str(Path(pyspark_kraft.__file__).resolve().parent.parent)


def prepare_environment(local: bool = True) -> None:
    """Environment the JVM and its Python workers inherit; call before the first session."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if "SPARK_LOCAL_IP" not in os.environ and "SPARK_MASTER_HOST" not in os.environ:
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    if not local:
        return
    root = package_root()
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([*paths, root])


def spark_session(master: str | None = None, app_name: str = "kraftsim", *, ui: bool = False,
                  progress: bool = True, extra: dict[str, str] | None = None) -> Any:
    """``getOrCreate`` a session on ``master`` (default ``local[*]``) with the settings above."""
    local = (master or "local[*]").startswith("local")
    prepare_environment(local)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name).master(master or "local[*]")
    conf = {
        "spark.ui.enabled": str(ui).lower(),
        "spark.ui.showConsoleProgress": str(progress).lower(),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    if local:
        # Local Python workers import pyspark_kraft from here; on a cluster, executors need the
        # `spark` extra installed (a wheel puts pyspark_kraft in site-packages, where Spark looks).
        conf["spark.executorEnv.PYTHONPATH"] = os.environ["PYTHONPATH"]
        # Metadata logs are small next to Spark's defaults: 200 shuffle partitions would make
        # every group-by of the image and the report mostly scheduling overhead on one machine.
        conf["spark.sql.shuffle.partitions"] = "4"
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    conf.update(extra or {})
    for k, v in conf.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()
