"""The KRaft metadata log as a Spark data source: ``spark.read.format("kraft").load(DIR)``.

Spark's Python data source lookup imports every top-level module named ``pyspark_*`` and
registers its ``DefaultSource`` under ``DefaultSource.name()`` ("kraft"), so installing the
``spark`` extra is all it takes; no registration call.

``DefaultSource`` is resolved lazily (PEP 562) so that ``kraftsim``'s console script can import
``pyspark_kraft.cli`` for its ``spark`` sub-commands without importing pyspark, and say
clearly that the extra is missing when it is.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DefaultSource"]


def __getattr__(name: str) -> Any:
    if name == "DefaultSource":
        from pyspark_kraft.source import DefaultSource

        return DefaultSource
    raise AttributeError(f"module 'pyspark_kraft' has no attribute {name!r}")
