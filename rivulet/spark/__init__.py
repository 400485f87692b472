"""PySpark source and sink for Rivulet and any Kafka-compatible broker, on Spark's Python Data
Source API (no JVM connector).

    import rivulet.spark
    rivulet.spark.register(spark)
    df = (spark.readStream.format("rivulet")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092").option("subscribe", "events").load())

Installing Rivulet also installs the top-level module ``pyspark_rivulet``, which Spark finds on
its own (it registers every ``pyspark_*`` module that exports ``DefaultSource``), so
``format("rivulet")`` works without calling ``register``. See docs/spark.md.
"""

from __future__ import annotations

from typing import Any

try:
    from pyspark.sql.datasource import DataSource
    from pyspark.sql.types import (
        ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType,
    )
except ImportError as e:  # pragma: no cover
    raise ImportError("rivulet.spark needs PySpark 4.2 or later and pyarrow: pip install 'rivulet[spark]'") from e

from rivulet.spark.sink import RivuletBatchWriter, RivuletStreamWriter, SinkOptions, validate_schema
from rivulet.spark.source import DataLossError, RivuletBatchReader, RivuletStreamReader, SourceOptions

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))

SCHEMA_NO_HEADERS = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
])
SCHEMA = StructType(SCHEMA_NO_HEADERS.fields + [StructField("headers", HEADERS_TYPE)])


class RivuletDataSource(DataSource):
    """``format("rivulet")``: Spark's Kafka source and sink options and schema."""

    @classmethod
    def name(cls) -> str:
        return "rivulet"

    def schema(self) -> StructType:
        include = str(self.options.get("includeHeaders", "true")).strip().lower() != "false"
        return SCHEMA if include else SCHEMA_NO_HEADERS

    def reader(self, schema: StructType) -> RivuletBatchReader:
        return RivuletBatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> RivuletStreamReader:
        return RivuletStreamReader(SourceOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> RivuletBatchWriter:
        opts = SinkOptions.parse(self.options)
        validate_schema(schema, opts)
        return RivuletBatchWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> RivuletStreamWriter:
        opts = SinkOptions.parse(self.options)
        validate_schema(schema, opts)
        return RivuletStreamWriter(opts)


def register(spark: Any) -> None:
    """Register ``format("rivulet")`` with a SparkSession (not needed when ``pyspark_rivulet`` is
    installed, but harmless)."""
    spark.dataSource.register(RivuletDataSource)


__all__ = ["RivuletDataSource", "register", "SCHEMA", "SCHEMA_NO_HEADERS", "DataLossError"]
