"""Make an editable install's ``pyspark_kraft`` visible to Spark's data source lookup.

    python -m pyspark_kraft.editable      (``make`` runs it after ``pip install -e``)

Spark (4.x) finds Python data sources only by listing the top-level modules of its Python
worker's ``sys.path`` with ``pkgutil.iter_modules()`` and importing those named ``pyspark_*``;
it reads no entry points. A wheel puts ``pyspark_kraft`` in site-packages, where that listing
sees it. An editable install of this repository does not: the checkout's root holds the
project's other top-level folders (``rpc``, ``metadata``, ...), so setuptools maps the two
packages through an import hook on ``sys.meta_path`` instead of a path entry, and
``iter_modules`` cannot see through an import hook. A plain ``SparkSession`` then fails with
DATA_SOURCE_NOT_FOUND.

This writes a ``.pth`` file into the environment's site-packages naming a directory that holds
one symlink, ``pyspark_kraft`` -> the checkout's package: a path entry with nothing else in it.
The same file sets ``PYSPARK_PYTHON`` to the environment's interpreter when it is unset: Spark
otherwise starts its Python workers with whatever ``python3`` comes first on ``PATH``, which,
for ``.venv/bin/python script.py`` without an activated environment, is another interpreter,
without pyspark or this package. A wheel install needs neither line (see docs/spark.md).
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

PTH_NAME = "pyspark_kraft_editable.pth"
LINK_DIR = "pyspark-kraft-path"  # under the environment's prefix


def install(prefix: Path | None = None) -> Path:
    """Write the link and the ``.pth`` file (idempotent); returns the ``.pth`` file's path."""
    package = Path(__file__).resolve().parent
    prefix = Path(sys.prefix) if prefix is None else prefix
    link_dir = prefix / LINK_DIR
    link_dir.mkdir(parents=True, exist_ok=True)
    link = link_dir / package.name
    if link.is_symlink() or link.exists():
        if link.resolve() != package:
            link.unlink()
    if not link.is_symlink():
        link.symlink_to(package, target_is_directory=True)
    site = Path(sysconfig.get_paths(vars={"base": str(prefix), "platbase": str(prefix)})["purelib"])
    pth = site / PTH_NAME
    pth.write_text(f"{link_dir}\nimport os, sys; os.environ.setdefault('PYSPARK_PYTHON', sys.executable)\n")
    return pth


def main() -> int:
    if sys.prefix == sys.base_prefix:
        print("pyspark_kraft.editable: not in a virtual environment; nothing written", file=sys.stderr)
        return 1
    pth = install()
    print(f"pyspark_kraft.editable: wrote {pth}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
