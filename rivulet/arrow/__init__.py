"""Kafka data as Arrow columns (pyarrow needed): ``records`` decodes fetched record batches into
key, value, offset, timestamp and headers columns, for the Spark source and Iceberg translation.

Uses only ``protocol``; imported by ``spark`` and ``iceberg``, never by the broker's core.
"""
