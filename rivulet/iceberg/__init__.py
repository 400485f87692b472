"""Topics as Apache Iceberg tables (docs/iceberg.md).

A topic with ``iceberg.mode`` other than ``none`` is also a table: each partition's leader
translates its committed records into Parquet data files and commits Iceberg snapshots whose
summaries record, per partition, the next offset to translate, so that whoever leads next
resumes from the table itself and no record is added twice.

Imports flow one way: this package uses ``storage``, ``protocol``, ``registry`` (the schema
look-ups and Arrow decoders of the schema modes) and ``common``; the broker
(``server``) builds and wires it in; nothing below imports it. pyiceberg and pyarrow (the
``iceberg`` extra) are imported only where a table is touched, on the translation thread, so a
broker without them starts and says so only when a topic asks for a table.
"""
