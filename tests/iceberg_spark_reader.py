"""Reads Rivulet's Iceberg tables with Spark through Iceberg's own Spark runtime and prints them.

Run by tests/integration/test_iceberg_spark.py with the Python of a virtual environment holding
PySpark 4.1 (no Iceberg Spark runtime runs on the project's PySpark 4.3, see docs/spark.md),
so it imports nothing from the project:

    python tests/iceberg_spark_reader.py CATALOG_DB WAREHOUSE_DIR IVY_DIR TOPIC...

One session: a JDBC catalog over the broker's SQLite catalog database, opened read-only, named
``iceberg`` as the broker's catalog names itself in its rows; then ``spark.table("rivulet.<topic>")``
for each topic. Prints one JSON line, {topic: [row, ...]}, rows as plain JSON: binary as
"b64:<base64>", timestamps as microseconds since the epoch, structs as objects.
"""

from __future__ import annotations

import base64
import calendar
import datetime
import decimal
import json
import os
import sys
import time

from pyspark.sql import Row, SparkSession

ICEBERG_RUNTIME = "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.11.0"
SQLITE_JDBC = "org.xerial:sqlite-jdbc:3.50.3.0"


def plain(v: object) -> object:
    """A value Spark collected, as JSON (the test writes pyiceberg's rows the same way)."""
    if isinstance(v, Row):
        return {k: plain(x) for k, x in v.asDict(recursive=False).items()}
    if isinstance(v, dict):
        return sorted([plain(k), plain(x)] for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return "b64:" + base64.b64encode(bytes(v)).decode()
    if isinstance(v, datetime.datetime):  # naive, in the session's UTC
        return calendar.timegm(v.timetuple()) * 1_000_000 + v.microsecond
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    return v


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far with its waited-for children's, from /proc: the JVM that
    spark-submit's script execs (after its launcher JVM, a child) is never waited for, so the
    caller's children's times miss it."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(t) for t in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def main(catalog_db: str, warehouse: str, ivy: str, topics: list[str]) -> None:
    started = time.monotonic()
    spark = (SparkSession.builder.master("local[1]").appName("iceberg-spark-reader")
             .config("spark.jars.packages", f"{ICEBERG_RUNTIME},{SQLITE_JDBC}")
             .config("spark.jars.ivy", ivy)
             .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
             .config("spark.sql.catalog.iceberg", "org.apache.iceberg.spark.SparkCatalog")
             .config("spark.sql.catalog.iceberg.type", "jdbc")
             .config("spark.sql.catalog.iceberg.uri", f"jdbc:sqlite:file:{catalog_db}?mode=ro")
             .config("spark.sql.catalog.iceberg.warehouse", f"file://{warehouse}")
             .config("spark.sql.defaultCatalog", "iceberg")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.shuffle.partitions", "1")
             .config("spark.ui.enabled", "false")
             .getOrCreate())
    try:
        tables = {}
        for topic in topics:
            df = spark.table(f"rivulet.`{topic}`")
            tables[topic] = {"schema": df.schema.simpleString(),
                             "rows": [plain(r) for r in df.orderBy("partition", "offset").collect()]}
        jvm_cpu = cpu_seconds(spark.sparkContext._gateway.proc.pid)
    finally:
        spark.stop()
    print(json.dumps({"tables": tables, "seconds": round(time.monotonic() - started, 1),
                      "jvm_cpu_seconds": round(jvm_cpu, 1)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
