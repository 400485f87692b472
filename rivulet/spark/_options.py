"""Option checks shared by the source and the sink: what Spark's Kafka connector refuses."""

from __future__ import annotations

import logging
from typing import Mapping

from rivulet.security.client_config import SASL_PROPERTIES, sasl_credentials
from rivulet.client.config import ssl_context
from rivulet.client.errors import ConfigException
from rivulet.spark._values import OPTIONS as VALUE_FORMAT_OPTIONS

log = logging.getLogger("rivulet.spark")

# kafka.* options Spark's Kafka source refuses, with why (the source decides these itself).
CONSUMER_REFUSED = {
    "auto.offset.reset": "set the source option startingOffsets to earliest or latest instead; the query "
                         "tracks its own offsets, and a restarted query resumes from its checkpoint",
    "key.deserializer": "keys are always read as bytes; deserialize them with DataFrame operations",
    "value.deserializer": "values are read as bytes; deserialize them with DataFrame operations, or set "
                          "valueFormat to decode them through a schema registry",
    "enable.auto.commit": "the query commits no offsets to Kafka",
    "interceptor.classes": "interceptors could change the records",
}
# kafka.* options Spark's Kafka sink refuses.
PRODUCER_REFUSED = {
    "key.serializer": "keys are written as bytes; serialize them to a string or binary key column",
    "value.serializer": "values are written as bytes; serialize them to a string or binary value column",
}
# kafka.* options the sink uses.
SINK_KAFKA_OPTIONS = frozenset({
    "bootstrap.servers", "compression.type", "batch.size", "transaction.timeout.ms", "security.protocol",
})
# kafka.* options the source uses; kafka.group.id is accepted as in Spark.
SOURCE_KAFKA_OPTIONS = frozenset({
    "bootstrap.servers", "isolation.level", "group.id", "fetch.max.bytes", "fetch.max.wait.ms", "check.crcs",
    "security.protocol",
})

# Options other than kafka.*, lower-case: Spark's Kafka source's, then Rivulet's own (path is
# what load(path) sets). Any other is warned about: Spark would ignore a misspelt one silently.
SOURCE_OPTIONS = frozenset({
    "assign", "subscribe", "subscribepattern", "startingoffsets", "endingoffsets", "startingtimestamp",
    "endingtimestamp", "startingoffsetsbytimestamp", "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy", "failondataloss", "minpartitions", "maxrecordsperpartition",
    "maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay", "fetchoffset.numretries",
    "fetchoffset.retryintervalms", "kafkaconsumer.polltimeoutms", "groupidprefix", "includeheaders", "path",
    "bootstrap.servers", "commitoffsets", "readondriver",
}) | VALUE_FORMAT_OPTIONS
# The sink's: Spark's Kafka sink's (and save(path)'s, writeStream's checkpointLocation), then Rivulet's.
SINK_OPTIONS = frozenset({"topic", "path", "checkpointlocation", "bootstrap.servers", "transactional",
                          "idempotencykey"})

SERVED_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def read_options(options: Mapping[str, str], refused: Mapping[str, str], kafka_known: frozenset[str],
                 known: frozenset[str], role: str) -> tuple[dict[str, str], str]:
    """The source's or sink's options with lower-cased names, checked (check_kafka_options,
    warn_unknown_options), and the bootstrap servers they must name."""
    o = {str(k).lower(): str(v) for k, v in options.items()}
    check_kafka_options(o, refused, kafka_known, role)
    warn_unknown_options(options, known, role)
    bootstrap = o.get("kafka.bootstrap.servers") or o.get("bootstrap.servers")
    if not bootstrap:
        raise ValueError("option kafka.bootstrap.servers (or bootstrap.servers) must be set")
    return o, bootstrap


def warn_unknown_options(options: Mapping[str, str], known: frozenset[str], role: str) -> None:
    """Warn about each option (not kafka.*: check_kafka_options has those) that neither Spark's
    Kafka connector nor Rivulet's ``role`` knows, named as it was given: a misspelt option
    would otherwise be ignored without a word. Names starting with _ are Spark's internals."""
    for key in options:
        name = str(key)
        lower = name.lower()
        if not lower.startswith(("kafka.", "_")) and lower not in known:
            log.warning("option %s is not an option of Rivulet's %s or of Spark's Kafka %s: it has no effect",
                        name, role, role)


def security_options(o: Mapping[str, str]) -> dict[str, str]:
    """The kafka.security.protocol, kafka.sasl.* and kafka.ssl.* options as client properties."""
    return {k[len("kafka."):]: v for k, v in o.items()
            if k == "kafka.security.protocol" or k[len("kafka."):] in SASL_PROPERTIES
            or (k.startswith("kafka.") and _is_ssl(k[len("kafka."):]))}


def check_kafka_options(o: Mapping[str, str], refused: Mapping[str, str], known: frozenset[str],
                        role: str) -> None:
    """Refuse what Spark's Kafka connector refuses and the security settings Rivulet's connector
    cannot honour (better a clear failure than a plaintext connection): SASL and TLS settings are
    checked as the client checks them; warn, as the Java client does, about other kafka.* options that
    have no effect. ``o`` has lower-case keys."""
    for key, value in o.items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka."):]
        if name in refused:
            raise ValueError(f"Kafka option '{name}' is not supported: {refused[name]}")
        if name == "security.protocol" and value.strip().upper() not in SERVED_PROTOCOLS:
            raise ValueError(f"kafka.security.protocol={value.strip()} is not supported yet by Rivulet's {role}: "
                             f"it connects with {' or '.join(SERVED_PROTOCOLS)}")
        if name.startswith("sasl.") and name not in SASL_PROPERTIES:
            raise ValueError(f"option kafka.{name} is not a SASL option Rivulet's {role} knows: "
                             f"{', '.join(p for p in SASL_PROPERTIES if p.startswith('sasl.'))}")
        if name not in known and name not in SASL_PROPERTIES and not _is_ssl(name):
            log.warning("option kafka.%s has no effect on Rivulet's %s", name, role)
    try:
        sasl_credentials(security_options(o))
    except ValueError as e:
        raise ValueError(f"Rivulet's {role}: {e}") from None
    try:
        # Builds the TLS context: an unknown ssl.* name or a store that cannot be read fails here.
        ssl_context(security_options(o))
    except ConfigException as e:
        raise ValueError(f"Rivulet's {role}: {e.args[0].str()}") from None


def _is_ssl(name: str) -> bool:
    return name.startswith("ssl.") or name == "enable.ssl.certificate.verification"
