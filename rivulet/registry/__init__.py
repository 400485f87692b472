"""A schema registry with Confluent Schema Registry's REST API, kept in the compacted
``_schemas`` topic in Confluent's record format (docs/schema-registry.md).

It is a Kafka client application: it reads and writes ``_schemas`` through ``rivulet.client``
and never imports the broker; the broker builds it in its composition root when
``schema.registry.listeners`` is set.
"""
