"""A log written by a running ``kraftsim controller`` under simulated brokers (over the wire), read
in Spark: the same rows as the project's reader, the same image as the Python MetadataImage."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest

from pyspark_kraft.image import image_at
from pyspark_kraft.workload import run
from tests.spark.reference import python_image, read_log


@pytest.mark.slow
def test_a_real_controllers_log(spark: Any, tmp_path: Path) -> None:
    d = run(tmp_path / "meta", brokers=3, seconds=8, quiet=True)
    ref = read_log(d)
    kinds = collections.Counter(r.record_type for r in ref)
    assert kinds["RegisterBrokerRecord"] >= 3 and kinds["TopicRecord"] >= 1 and kinds["LeaderChangeMessage"] == 1
    assert kinds["BrokerRegistrationChangeRecord"] >= 2  # fenced by the session timeout, unfenced again
    df = spark.read.format("kraft").load(str(d))
    assert {r["record_type"]: r["count"] for r in df.groupBy("record_type").count().collect()} == dict(kinds)
    assert [r[0] for r in df.select("offset").orderBy("offset").collect()] == [r.offset for r in ref]
    last = ref[-1].offset
    for at in (last // 2, last):
        assert image_at(spark, str(d), at) == python_image(d, at), at
