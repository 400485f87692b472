"""``valueFormat``: values decoded into a typed ``value`` column (docs/spark.md): values in a
schema registry's wire format, whose writer's schemas come from the registry by id (the
column's type is the reader's schema, the subject's latest version when the query is planned),
or plain JSON of a schema given in ``valueSchema``."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Mapping

import pyarrow as pa
from pyspark.sql.types import StructType

from rivulet.registry.arrow import ArrowDecoder, ValueFault, arrow_type
from rivulet.registry.client import RegisteredSchema, RegistryClient, RegistryError, registry_client_tls
from rivulet.registry.schema_types import FORMAT_TYPES
from rivulet.spark._json_values import JsonDecoder, parse_schema

# The source's options for it, lower-case (Spark's options are case-insensitive). The
# schema.registry.* names are those of Confluent's serializers and SchemaRegistryClient.
OPTIONS = frozenset({
    "valueformat", "valuesubject", "valuemessagename", "valueschema", "mode", "schema.registry.url",
    "schema.registry.basic.auth.user.info", "schema.registry.ssl.ca.location",
    "schema.registry.ssl.certificate.location", "schema.registry.ssl.key.location",
})
FAILFAST, PERMISSIVE = "FAILFAST", "PERMISSIVE"
JSON_FORMAT = "json"  # plain JSON, of the schema in valueSchema
# PERMISSIVE's columns for a value that could not be decoded (null where it was).
ERROR_COLUMN, RAW_COLUMN = "valueError", "rawValue"


class ValueDecodeError(ValueError):
    """A value the query could not decode (mode FAILFAST)."""


@dataclass(frozen=True)
class ValueFormat:
    """The parsed options; picklable (executors build their client and decoder from it)."""

    fmt: str
    url: str
    subject: str
    message_name: str | None = None
    permissive: bool = False
    user_info: str = ""
    ca_location: str = ""
    certificate_location: str = ""
    key_location: str = ""
    reader: RegisteredSchema | None = None  # filled at planning
    value_schema: str = ""  # valueFormat=json: the StructType's JSON

    @classmethod
    def parse(cls, o: Mapping[str, str], topics: list[str] | None) -> ValueFormat | None:
        """From the lower-cased options; None without ``valueFormat``."""
        fmt = o.get("valueformat", "").strip().lower()
        if not fmt:
            for key in OPTIONS - {"valueformat"}:
                if key in o:
                    raise ValueError(f"option {key} needs valueFormat (avro, protobuf, json-schema or json)")
            return None
        mode = o.get("mode", FAILFAST).strip().upper()
        if mode not in (FAILFAST, PERMISSIVE):
            raise ValueError(f"option mode must be FAILFAST or PERMISSIVE, got {mode!r}")
        if fmt == JSON_FORMAT:
            for key in OPTIONS - {"valueformat", "valueschema", "mode"}:
                if key in o:
                    raise ValueError(f"option {key} is for a schema registry's formats, not valueFormat=json")
            vf = cls(fmt, "", "", permissive=mode == PERMISSIVE, value_schema=parse_schema(o.get("valueschema", "")).json())
            JsonDecoder(vf.value_type())  # refuses, at planning, a type it cannot read
            return vf
        if "valueschema" in o:
            raise ValueError(f"option valueSchema is for valueFormat=json; valueFormat={fmt} takes the schema "
                             "from the registry")
        if fmt not in FORMAT_TYPES:
            raise ValueError(f"option valueFormat must be one of {', '.join([*FORMAT_TYPES, JSON_FORMAT])}, "
                             f"got {fmt!r}")
        url = o.get("schema.registry.url", "").strip()
        if not url:
            raise ValueError(f"valueFormat={fmt} needs the option schema.registry.url")
        subject = o.get("valuesubject", "").strip()
        if not subject:
            if not topics or len(topics) != 1:
                raise ValueError("option valueSubject must be set unless the query subscribes to one topic "
                                 "(its subject is then <topic>-value)")
            subject = f"{topics[0]}-value"
        return cls(fmt, url.split(",")[0].strip(), subject, o.get("valuemessagename") or None, mode == PERMISSIVE,
                   o.get("schema.registry.basic.auth.user.info", ""), o.get("schema.registry.ssl.ca.location", ""),
                   o.get("schema.registry.ssl.certificate.location", ""),
                   o.get("schema.registry.ssl.key.location", ""))

    def client(self) -> RegistryClient:
        return RegistryClient(self.url, self.user_info, registry_client_tls(self.url, self.ca_location,
                                                                     self.certificate_location, self.key_location))

    def planned(self) -> ValueFormat:
        """With the subject's latest schema as the reader's, checked to be of the format."""
        if self.fmt == JSON_FORMAT:
            return self
        try:
            latest = self.client().latest(self.subject)
        except RegistryError as e:
            raise ValueError(f"valueFormat={self.fmt}: the schema of subject {self.subject}: {e}") from None
        if latest.schema_type != FORMAT_TYPES[self.fmt]:
            raise ValueError(f"valueFormat={self.fmt}, but subject {self.subject} holds {latest.schema_type} "
                             f"schemas")
        return ValueFormat(self.fmt, self.url, self.subject, self.message_name, self.permissive, self.user_info,
                           self.ca_location, self.certificate_location, self.key_location, latest)

    def value_type(self) -> pa.DataType:
        if self.fmt == JSON_FORMAT:
            from pyspark.sql.pandas.types import to_arrow_type
            return to_arrow_type(StructType.fromJson(json.loads(self.value_schema)), timezone="UTC")
        assert self.reader is not None, "planned first"
        return arrow_type(self.reader, self.message_name)


def spark_value_type(vf: ValueFormat):  # type: ignore[no-untyped-def]
    """The ``value`` column's Spark type (``ValueError`` for a type Spark has not)."""
    from pyspark.sql.pandas.types import from_arrow_type
    if vf.fmt == JSON_FORMAT:
        return StructType.fromJson(json.loads(vf.value_schema))
    try:
        return from_arrow_type(vf.value_type())
    except TypeError as e:
        raise ValueError(f"valueFormat={vf.fmt}: subject {vf.subject}'s schema has a type Spark cannot hold: "
                         f"{e}") from None


# One decoder per executor process and reader schema: each keeps the writers' schemas it parsed.
_decoders: dict[ValueFormat, tuple[ArrowDecoder | JsonDecoder, pa.DataType]] = {}
_lock = threading.Lock()


def _decoder(vf: ValueFormat) -> tuple[ArrowDecoder | JsonDecoder, pa.DataType]:
    with _lock:
        found = _decoders.get(vf)
        if found is None:
            from pyspark.sql.pandas.types import to_arrow_type
            decoder: ArrowDecoder | JsonDecoder
            if vf.fmt == JSON_FORMAT:
                decoder = JsonDecoder(vf.value_type())
            else:
                assert vf.reader is not None
                decoder = ArrowDecoder(vf.client(), vf.reader, vf.message_name)
            # Spark's own Arrow layout of the type (its list items are "element").
            found = _decoders[vf] = (decoder, to_arrow_type(spark_value_type(vf), timezone="UTC"))
        return found


def decode_batch(vf: ValueFormat, batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with its ``value`` column decoded (and PERMISSIVE's two columns appended)."""
    decoder, spark_type = _decoder(vf)
    at = batch.schema.get_field_index("value")
    raw = batch.column(at)
    decoded = decoder.decode_column(raw)
    if decoded.faults and not vf.permissive:
        f = decoded.faults[0]
        offset = batch.column(batch.schema.get_field_index("offset"))[f.index].as_py()
        topic = batch.column(batch.schema.get_field_index("topic"))[f.index].as_py()
        partition = batch.column(batch.schema.get_field_index("partition"))[f.index].as_py()
        raise ValueDecodeError(f"{topic}-{partition} offset {offset}: cannot decode the value ({f.kind}): "
                               f"{f.message}. Set the option mode to PERMISSIVE to read such values as null, "
                               f"with {ERROR_COLUMN} and {RAW_COLUMN}")
    columns = list(batch.columns)
    names = list(batch.schema.names)
    columns[at] = decoded.column.cast(spark_type)
    if vf.permissive:
        columns += _fault_columns(decoded.faults, raw, batch.num_rows)
        names += [ERROR_COLUMN, RAW_COLUMN]
    return pa.RecordBatch.from_arrays(columns, names=names)


def _fault_columns(faults: tuple[ValueFault, ...], raw: pa.Array, rows: int) -> list[pa.Array]:
    """PERMISSIVE's columns: each undecodable value's reason and bytes, null elsewhere. Without
    a fault (nearly every batch) two null columns, with no Python object per row."""
    if not faults:
        return [pa.nulls(rows, pa.string()), pa.nulls(rows, pa.binary())]
    errors: list[str | None] = [None] * rows
    kept: list[bytes | None] = [None] * rows
    for f in faults:
        errors[f.index] = f"{f.kind}: {f.message}"
        kept[f.index] = raw[f.index].as_py()
    return [pa.array(errors, pa.string()), pa.array(kept, pa.binary())]
