"""A streaming query in its own process: icetail (killable seam) -> parquet file sink, AvailableNow.

argv: options as JSON, the directory holding `sink/` and `checkpoint/`.
"""

from __future__ import annotations

import json
import sys

from icetail.reader.spark.session import spark_session
from tests.spark4.killable_source import KillableChangesDataSource


def main() -> None:
    options, root = json.loads(sys.argv[1]), sys.argv[2]
    spark = spark_session(conf={"spark.sql.session.timeZone": "UTC"})
    spark.dataSource.register(KillableChangesDataSource)
    query = (
        spark.readStream.format("icetail_killable")
        .options(**options)
        .load()
        .writeStream.format("parquet")
        .option("path", f"{root}/sink")
        .option("checkpointLocation", f"{root}/checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
