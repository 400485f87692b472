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

import sys
import weakref
from typing import TYPE_CHECKING

try:
    from pyspark.errors import PySparkNotImplementedError
    from pyspark.sql.datasource import DataSource
    from pyspark.sql.types import (
        ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType,
    )
except ImportError as e:  # pragma: no cover
    raise ImportError("rivulet.spark needs PySpark 4.2 or later and pyarrow: pip install 'rivulet[spark]'") from e

from rivulet.spark.source import (DataLossError, RivuletBatchReader, RivuletDriverStreamReader, RivuletStreamReader,
                                  SourceOptions)
from rivulet.spark._values import ERROR_COLUMN, RAW_COLUMN, ValueFormat, spark_value_type

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.readwriter import DataFrameWriter
    from rivulet.spark.sink import RivuletBatchWriter, RivuletStreamWriter

# What PySpark's DataFrameWriter.save takes (its own annotations: str or a list, and
# OptionalPrimitiveType options).
PartitionBy = str | list[str] | None
Option = bool | float | int | str | None

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
        # Spark's Kafka source: headers only with includeHeaders=true.
        include = {str(k).lower(): str(v) for k, v in self.options.items()}.get("includeheaders", "false")
        schema = SCHEMA if include.strip().lower() == "true" else SCHEMA_NO_HEADERS
        vf = self._value_format()
        if vf is None:
            return schema
        return value_schema(schema, vf)

    def _value_format(self) -> ValueFormat | None:
        """valueFormat's options with the subject's latest schema, asked once per data source:
        Spark plans with the schema() of the instance it then asks for a reader."""
        if "_planned" not in self.__dict__:
            o = {str(k).lower(): str(v) for k, v in self.options.items()}
            vf = ValueFormat.parse(o, sorted({t.strip() for t in o.get("subscribe", "").split(",") if t.strip()}))
            self._planned = vf.planned() if vf is not None else None
        return self._planned

    def _source_options(self, schema: StructType, streaming: bool) -> SourceOptions:
        opts = SourceOptions.parse(self.options, streaming=streaming)
        if opts.value_format is not None:
            vf = opts.value_format = self._value_format()
            assert vf is not None
            if "value" in schema.fieldNames() and schema["value"].dataType != spark_value_type(vf):
                raise ValueError(f"subject {vf.subject} has a new latest schema since the query was planned: "
                                 "plan it again")
        return opts

    def reader(self, schema: StructType) -> RivuletBatchReader:
        return RivuletBatchReader(self._source_options(schema, streaming=False))

    def streamReader(self, schema: StructType) -> RivuletStreamReader:
        opts = self._source_options(schema, streaming=True)
        if opts.read_on_driver:
            # PySpark asks simpleStreamReader() when streamReader() is not implemented.
            raise PySparkNotImplementedError(errorClass="NOT_IMPLEMENTED",
                                             messageParameters={"feature": "streamReader"})
        return RivuletStreamReader(opts)

    def simpleStreamReader(self, schema: StructType) -> RivuletDriverStreamReader:
        return RivuletDriverStreamReader(self._source_options(schema, streaming=True))

    # The sink is imported when asked for: the source's planner process (one per streaming
    # query, started by Spark) unpickles this class and must not pay for the producer's imports.
    def writer(self, schema: StructType, overwrite: bool) -> RivuletBatchWriter:
        from rivulet.spark.sink import RivuletBatchWriter, SinkOptions, validate_schema
        refuse_overwrite(overwrite)
        opts = SinkOptions.parse(self.options)
        validate_schema(schema, opts)
        return RivuletBatchWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> RivuletStreamWriter:
        from rivulet.spark.sink import RivuletStreamWriter, SinkOptions, validate_schema
        opts = SinkOptions.parse(self.options)
        validate_schema(schema, opts)
        return RivuletStreamWriter(opts)


def value_schema(schema: StructType, vf: ValueFormat) -> StructType:
    """The source's schema with ``value`` of the registry's type (and PERMISSIVE's columns)."""
    fields = [StructField("value", spark_value_type(vf)) if f.name == "value" else f for f in schema.fields]
    if vf.permissive:
        fields += [StructField(ERROR_COLUMN, StringType()), StructField(RAW_COLUMN, BinaryType())]
    return StructType(fields)


def refuse_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise ValueError("save mode Overwrite is not allowed for format rivulet (a topic cannot be truncated): "
                         "use Append or ErrorIfExists (the default), as with Spark's Kafka sink")


# Save modes the writers were given, for the format("rivulet") writes only.
_writer_formats: "weakref.WeakKeyDictionary[DataFrameWriter, str]" = weakref.WeakKeyDictionary()
_writer_modes: "weakref.WeakKeyDictionary[DataFrameWriter, str]" = weakref.WeakKeyDictionary()
_save_mode_installed = False
_connect_save_mode_installed = False


def _install_default_save_mode() -> None:
    """Let ``df.write.format("rivulet").save()`` run in the default mode, as Spark's Kafka sink does.

    Spark's Kafka sink takes ErrorIfExists (the default) like Append, but Spark refuses
    ErrorIfExists for every Python data source before the source is asked; so PySpark's
    writer turns it into Append for this format only. Overwrite is refused by the writer,
    Ignore by Spark itself, both as for Kafka.
    """
    global _save_mode_installed
    if _save_mode_installed:
        return
    _save_mode_installed = True
    from pyspark.sql.readwriter import DataFrameWriter

    base_format, base_mode, base_save = DataFrameWriter.format, DataFrameWriter.mode, DataFrameWriter.save

    def format(self: DataFrameWriter, source: str) -> DataFrameWriter:
        _writer_formats[self] = str(source).lower()
        return base_format(self, source)

    def mode(self: DataFrameWriter, saveMode: str | None) -> DataFrameWriter:
        if saveMode is not None:
            _writer_modes[self] = str(saveMode).lower()
        return base_mode(self, saveMode)

    def save(self: DataFrameWriter, path: str | None = None, format: str | None = None, mode: str | None = None,
             partitionBy: PartitionBy = None, **options: Option) -> None:
        if _takes_default_mode(format or _writer_formats.get(self), mode or _writer_modes.get(self)):
            mode = "append"
        return base_save(self, path, format, mode, partitionBy, **options)

    format.__doc__, mode.__doc__, save.__doc__ = base_format.__doc__, base_mode.__doc__, base_save.__doc__
    DataFrameWriter.format, DataFrameWriter.mode, DataFrameWriter.save = format, mode, save  # type: ignore[method-assign]
    if "pyspark.sql.connect.readwriter" in sys.modules:  # a Spark Connect client; else register() does it
        _install_default_save_mode_connect()


def _takes_default_mode(fmt: str | None, mode: str | None) -> bool:
    return (fmt or "").lower() == RivuletDataSource.name() and \
        (mode or "errorifexists").lower() in ("error", "errorifexists", "default")


def _install_default_save_mode_connect() -> None:
    """The same for Spark Connect's DataFrameWriter, which keeps the format and mode in its
    write operation (the server refuses ErrorIfExists as the classic one does). Not at import
    unless Connect is loaded: executors import this module, and Connect's client brings grpc
    and pandas."""
    global _connect_save_mode_installed
    if _connect_save_mode_installed:
        return
    _connect_save_mode_installed = True
    try:
        from pyspark.sql.connect.readwriter import DataFrameWriter as ConnectWriter
    except ImportError:  # Spark Connect's client dependencies (grpcio, pandas) are not installed
        return
    base_save = ConnectWriter.save

    def save(self: ConnectWriter, path: str | None = None, format: str | None = None, mode: str | None = None,
             partitionBy: PartitionBy = None, **options: Option) -> None:
        if _takes_default_mode(format or self._write.source, mode or self._write.mode):
            mode = "append"
        return base_save(self, path, format, mode, partitionBy, **options)

    save.__doc__ = base_save.__doc__
    ConnectWriter.save = save  # type: ignore[method-assign]


def register(spark: SparkSession) -> None:
    """Register ``format("rivulet")`` with a SparkSession (not needed when ``pyspark_rivulet`` is
    installed, but harmless)."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        _install_default_save_mode_connect()
    spark.dataSource.register(RivuletDataSource)


_install_default_save_mode()


__all__ = ["RivuletDataSource", "register", "SCHEMA", "SCHEMA_NO_HEADERS", "DataLossError"]
