"""Broker configuration: every property the broker takes, by Kafka's names.

Each property is one ``ConfigKey`` (type, default, validator, documentation, importance and
Kafka's dynamic update mode). Kafka's deployment properties that mean nothing to a single
Python process (thread counts, socket buffers, quorum settings) are defined too, marked
``ignored``, so an existing server.properties works unchanged; any other unknown name stops
start-up with a message naming it. Defaults are Kafka 4.3's, except where a single local
node needs its own (``node.id``, ``listeners``, ``log.dir``, ``process.roles``).
"""

from __future__ import annotations

import operator
import sys
from pathlib import Path
from typing import Any, Callable, Collection, Iterator
from urllib.parse import urlsplit

from rivulet.common.config import (
    LONG_MAX,
    ConfigDef,
    ConfigError,
    ConfigKey,
    ConfigType,
    Importance,
    UpdateMode,
    at_least,
    between,
    each_of,
    load_properties as _load_properties,
    one_of,
    one_of_ignoring_case,
)
from rivulet.replication.replica_selector import SELECTORS
from rivulet.security.authorizer import AUTHORIZER_CLASS_NAMES
from rivulet.storage.config import SEGMENT_BYTES_MIN

__all__ = ["BROKER_CONFIGS", "BrokerConfig", "ConfigError", "LIST_PROPERTIES", "load_properties", "parse_listener"]

B, S, I, SH, L, D, LS, PW, CL = (ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.SHORT,
                                 ConfigType.LONG, ConfigType.DOUBLE, ConfigType.LIST, ConfigType.PASSWORD,
                                 ConfigType.CLASS)
HIGH, MEDIUM, LOW = Importance.HIGH, Importance.MEDIUM, Importance.LOW
RO, PER_BROKER, CLUSTER = UpdateMode.READ_ONLY, UpdateMode.PER_BROKER, UpdateMode.CLUSTER_WIDE
LAST_PUSH_RECEIVER = "rivulet.server.client_metrics.LastPayloads"
PROMETHEUS_TELEMETRY = "rivulet.server.metrics.telemetry.ClientTelemetryExporter"
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

_nonneg = at_least(0)
_pos = at_least(1)


def _no_tiered_storage(enabled: bool) -> str | None:
    return "Rivulet has no tiered storage" if enabled else None


DEFAULT_PRINCIPAL_BUILDER = "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"


def _principal_builder(v: str | None) -> str | None:
    return None if not v or v == DEFAULT_PRINCIPAL_BUILDER else \
        f"Class {v} could not be found. Rivulet has {DEFAULT_PRINCIPAL_BUILDER} only"


def _no_java_plugin(v: str | None) -> str | None:
    return f"Class {v} could not be found. Rivulet runs no Java plugins" if v else None


def _no_two_phase_commit(enabled: bool) -> str | None:
    return "Rivulet has no two-phase commit transactions (KIP-939)" if enabled else None


def _compression_codec(v: int) -> str | None:
    return None if 0 <= v <= 4 else f"Unknown compression type id: {v}"


def _non_empty(v: str) -> str | None:
    return None if v else "String must be non-empty"



def _selector(v: str | None) -> str | None:
    return None if v is None or v in SELECTORS else f"Unknown replica selector {v}; known: {', '.join(SELECTORS)}"


def _authorizer(v: str | None) -> str | None:
    return None if not v or v in AUTHORIZER_CLASS_NAMES else \
        f"Unknown authorizer {v}; known: {', '.join(sorted(AUTHORIZER_CLASS_NAMES))}"


def parse_metrics_listener(url: str, prop: str = "metrics.listener") -> tuple[str, int]:
    """``metrics.listener`` (or another ``prop`` of that form), ``http://host:port``, into
    (host, port); an empty host listens on every address."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or port is None or parts.path not in ("", "/"):
        raise ValueError(f"{prop} must be http://host:port, not {url!r}")
    return parts.hostname or "", port


def _metrics_listener(v: str | None) -> str | None:
    if not v:
        return None
    try:
        parse_metrics_listener(v)
    except ValueError as e:
        return str(e)
    return None


def parse_registry_listener(url: str) -> tuple[str, str, int]:
    """``schema.registry.listeners``' ``http://host:port`` or ``https://host:port`` into
    (scheme, host, port)."""
    parts = urlsplit(url)
    scheme = (parts.scheme or "").lower()
    host, port = parse_metrics_listener(url.replace(parts.scheme + "://", "http://", 1) if scheme == "https" else url,
                                        "schema.registry.listeners")
    return scheme, host, port


def _registry_listeners(v: Collection[str] | None) -> str | None:
    try:
        for url in v or ():
            parse_registry_listener(url)
    except ValueError as e:
        return str(e).replace("must be http://host:port", "must be http://host:port or https://host:port")
    return None


def _registry_url(v: str | None) -> str | None:
    if not v:
        return None
    parts = urlsplit(v)
    return None if parts.scheme in ("http", "https") and parts.hostname else \
        "iceberg.schema.registry.url must be an http:// or https:// URL"


def _k(name: str, ctype: ConfigType, default: Any, validator: Any = None, doc: str = "",
       importance: Importance = MEDIUM, mode: UpdateMode = RO, ignored: bool = False) -> ConfigKey:
    return ConfigKey(name, ctype, default, validator, doc, importance, mode, ignored)


BROKER_CONFIGS = ConfigDef([
    # -- identity and listeners
    _k("node.id", I, 1, _nonneg, "This node's id (Rivulet's default is 1; Kafka requires it to be set).", HIGH),
    _k("broker.id", I, -1, None, "The node id under its older name; used when node.id is not set.", HIGH),
    _k("process.roles", LS, ("broker", "controller"), each_of("broker", "controller"),
       "The roles this node plays. Rivulet is always a combined broker and controller.", HIGH),
    _k("listeners", LS, ("PLAINTEXT://127.0.0.1:9092",), None,
       "Addresses to listen on, as NAME://host:port, comma-separated. A listener named in "
       "controller.listener.names is not opened.", HIGH, PER_BROKER),
    _k("advertised.listeners", LS, None, None,
       "Addresses given to clients in metadata, when they differ from listeners; each must name a "
       "listener in listeners, else the broker does not start. Port 0 in listeners is replaced by the "
       "bound port.", HIGH),
    _k("listener.security.protocol.map", S,
       "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT", None,
       "Listener name to security protocol, as NAME:PROTOCOL pairs (PLAINTEXT, SSL, SASL_PLAINTEXT, "
       "SASL_SSL). Settings for one listener are given as listener.name.<name, lowercased>.<property>.",
       LOW, PER_BROKER),
    _k("inter.broker.listener.name", S, None, None, "The listener other brokers and the controller reach "
       "this broker on; when not set, the listener named after security.inter.broker.protocol. Not both.",
       MEDIUM),
    _k("security.inter.broker.protocol", S, "PLAINTEXT", one_of(*("PLAINTEXT", "SSL", "SASL_PLAINTEXT",
                                                                  "SASL_SSL")),
       "The security protocol between brokers, when inter.broker.listener.name is not set.", MEDIUM),
    # -- TLS (SSL and SASL_SSL listeners, and this broker's own connections to other brokers). Read at
    #    start-up: Kafka's dynamic key store updates are not served, so AlterConfigs refuses them.
    _k("ssl.keystore.type", S, "JKS", None, "Key store format: PKCS12 or PEM (a JKS name reads a PKCS12 "
       "file, as Java's does; a real JKS file is refused).", MEDIUM),
    _k("ssl.keystore.location", S, None, None, "The key store file: the listener's private key and "
       "certificate chain.", HIGH),
    _k("ssl.keystore.password", PW, None, None, "Password of a PKCS12 key store.", HIGH),
    _k("ssl.key.password", PW, None, None, "Password of the private key (an encrypted PEM key).", HIGH,
       ),
    _k("ssl.keystore.certificate.chain", PW, None, None, "The certificate chain in PEM, inline "
       "(ssl.keystore.type=PEM).", HIGH),
    _k("ssl.keystore.key", PW, None, None, "The private key in PEM, inline (ssl.keystore.type=PEM).", HIGH,
       ),
    _k("ssl.truststore.type", S, "JKS", None, "Trust store format: PKCS12 or PEM.", MEDIUM),
    _k("ssl.truststore.location", S, None, None, "The trust store file: the CAs client certificates are "
       "checked against (and other brokers' certificates).", HIGH),
    _k("ssl.truststore.password", PW, None, None, "Password of a PKCS12 trust store.", HIGH),
    _k("ssl.truststore.certificates", PW, None, None, "Trusted certificates in PEM, inline "
       "(ssl.truststore.type=PEM).", HIGH),
    _k("ssl.protocol", S, "TLSv1.3", None, "The TLS protocol; the enabled ones are "
       "ssl.enabled.protocols.", MEDIUM),
    _k("ssl.enabled.protocols", LS, ("TLSv1.2", "TLSv1.3"), None, "TLS versions accepted.", MEDIUM,
       ),
    _k("ssl.cipher.suites", LS, (), None, "TLS 1.2 cipher suites allowed (IANA or OpenSSL names); all "
       "of OpenSSL's defaults when empty.", LOW),
    _k("ssl.client.auth", S, "none", one_of("required", "requested", "none"), "Whether clients must "
       "(required), may (requested) or do not present a certificate.", MEDIUM),
    _k("ssl.endpoint.identification.algorithm", S, "https", None, "Checking of the host name in another "
       "broker's certificate on inter-broker connections: https, or empty for none.", LOW),
    _k("ssl.principal.mapping.rules", S, "DEFAULT", None, "How a client certificate's subject becomes "
       "the principal's name: RULE:pattern/replacement/[LU] entries and DEFAULT (the whole DN).", LOW),
    _k("ssl.keymanager.algorithm", S, "SunX509", None, "A JSSE setting.", LOW, PER_BROKER, ignored=True),
    _k("ssl.trustmanager.algorithm", S, "PKIX", None, "A JSSE setting.", LOW, PER_BROKER, ignored=True),
    _k("ssl.secure.random.implementation", S, None, None, "A JSSE setting.", LOW, PER_BROKER, ignored=True),
    _k("ssl.provider", S, None, None, "A JSSE setting.", MEDIUM, PER_BROKER, ignored=True),
    _k("ssl.engine.factory.class", CL, None, None, "A JSSE setting.", LOW, PER_BROKER, ignored=True),
    _k("ssl.allow.dn.changes", B, False, None, "Java's check of a reconfigured key store.", LOW,
       ignored=True),
    _k("ssl.allow.san.changes", B, False, None, "Java's check of a reconfigured key store.", LOW,
       ignored=True),
    _k("controller.listener.names", LS, ("CONTROLLER",), None, "Names of the controller listeners.", HIGH),
    _k("cluster.id", S, None, None,
       "The cluster id to write into meta.properties on first start; a random one when not set.", HIGH),
    _k("log.dirs", LS, None, None, "Directories for partition data, comma-separated; log.dir when not set.", HIGH),
    _k("log.dir", LS, ("./rivulet-data",), None, "The data directory when log.dirs is not set.", HIGH),
    # -- topics
    _k("num.partitions", I, 1, _pos, "Partitions of a topic created without a partition count.", MEDIUM),
    _k("default.replication.factor", I, 1, _pos, "Replication factor of a topic created without one.", MEDIUM),
    _k("auto.create.topics.enable", B, True, None, "Create a topic when a client asks for its metadata.", HIGH),
    _k("delete.topic.enable", B, True, None, "Allow DeleteTopics; when false it fails with "
       "TOPIC_DELETION_DISABLED.", HIGH),
    # -- log defaults for topics (the broker synonyms of the topic configs)
    _k("log.retention.ms", L, None, None, "How long to keep a segment before deleting it, in ms; -1 keeps "
       "it forever. When not set, log.retention.minutes is used.", HIGH, CLUSTER),
    _k("log.retention.minutes", I, None, None, "Retention in minutes, used when log.retention.ms is not set.",
       HIGH),
    _k("log.retention.hours", I, 168, None, "Retention in hours, used when neither log.retention.ms nor "
       "log.retention.minutes is set.", HIGH),
    _k("log.retention.bytes", L, -1, None, "Largest size of a partition before old segments are deleted; "
       "-1 for no limit.", HIGH, CLUSTER),
    _k("log.segment.bytes", I, 1073741824, at_least(SEGMENT_BYTES_MIN), "Size at which a segment is rolled; at least 1 MiB.",
       HIGH, CLUSTER),
    _k("log.roll.ms", L, None, None, "Age at which a segment is rolled, in ms; log.roll.hours when not set.",
       HIGH, CLUSTER),
    _k("log.roll.hours", I, 168, _pos, "Age at which a segment is rolled, in hours.", HIGH),
    _k("log.roll.jitter.ms", L, None, None, "Most random jitter subtracted from the roll time, in ms; "
       "log.roll.jitter.hours when not set.", HIGH, CLUSTER),
    _k("log.roll.jitter.hours", I, 0, _nonneg, "Most random jitter subtracted from the roll time, in hours.",
       HIGH),
    _k("log.segment.delete.delay.ms", L, 60000, _nonneg, "Wait before a deleted segment's files are removed.",
       HIGH, CLUSTER),
    _k("log.index.interval.bytes", I, 4096, _nonneg, "Bytes of records between two offset-index entries.",
       MEDIUM, CLUSTER),
    _k("log.index.size.max.bytes", I, 10485760, at_least(4), "Largest size of an offset or time index.",
       MEDIUM, CLUSTER),
    _k("log.flush.interval.messages", L, LONG_MAX, _pos, "Records appended to a partition before an fsync.",
       HIGH, CLUSTER),
    _k("log.flush.interval.ms", L, None, None, "Longest time a record waits in memory before an fsync; "
       "log.flush.scheduler.interval.ms when not set.", HIGH, CLUSTER),
    _k("log.flush.scheduler.interval.ms", L, LONG_MAX, None, "How often logs are checked for a time-based "
       "flush.", HIGH),
    _k("log.flush.offset.checkpoint.interval.ms", I, 60000, _nonneg, "How often the recovery points are "
       "written.", HIGH),
    _k("log.flush.start.offset.checkpoint.interval.ms", I, 60000, _nonneg, "How often the log start "
       "offsets are written.", HIGH),
    _k("log.retention.check.interval.ms", L, 300000, _pos, "How often retention is enforced.", MEDIUM),
    _k("log.initial.task.delay.ms", L, 30000, _nonneg, "How long after start the first retention pass and "
       "checkpoint run (Kafka's internal setting: a record older than the retention is deleted about this long "
       "after start, not a whole log.retention.check.interval.ms later).", LOW),
    _k("log.cleanup.policy", LS, ("delete",), each_of("compact", "delete"), "Default cleanup policy: "
       "delete, compact, or both.", MEDIUM, CLUSTER),
    _k("log.cleaner.enable", B, True, None, "Run the log cleaner for compacted topics.", MEDIUM),
    _k("log.cleaner.backoff.ms", L, 15000, _nonneg, "Pause of the cleaner when no log needs cleaning.",
       MEDIUM, CLUSTER),
    _k("log.cleaner.delete.retention.ms", L, 86400000, _nonneg, "How long tombstones and transaction markers "
       "are kept on compacted topics.", MEDIUM, CLUSTER),
    _k("log.cleaner.min.compaction.lag.ms", L, 0, _nonneg, "Youngest a record may be and still be "
       "compacted.", MEDIUM, CLUSTER),
    _k("log.cleaner.max.compaction.lag.ms", L, LONG_MAX, _pos, "Oldest a record may get before its segment "
       "must be compacted.", MEDIUM, CLUSTER),
    _k("log.cleaner.min.cleanable.ratio", D, 0.5, between(0, 1), "Dirty share of a log above which it is "
       "cleaned.", MEDIUM, CLUSTER),
    _k("log.cleaner.threads", I, 1, _nonneg, "Cleaner threads (one cleaner task here): at least 1, and "
       "log.cleaner.dedupe.buffer.size must leave more than 1MB per thread (1 to 127 with its default), as "
       "in Kafka.", MEDIUM, CLUSTER, ignored=True),
    _k("log.cleaner.dedupe.buffer.size", L, 128 * 1024 * 1024, None, "Memory for deduplication across the "
       "cleaner threads; more than 1MB per thread.", MEDIUM, CLUSTER, ignored=True),
    _k("log.cleaner.io.buffer.load.factor", D, 0.9, None, "How full the deduplication buffer may get.",
       MEDIUM, CLUSTER, ignored=True),
    _k("log.cleaner.io.buffer.size", I, 512 * 1024, _nonneg, "I/O buffer memory across the cleaner threads.",
       MEDIUM, CLUSTER, ignored=True),
    _k("log.cleaner.io.max.bytes.per.second", D, sys.float_info.max, None, "Cap on the cleaner's reads and "
       "writes, bytes/s.", MEDIUM, CLUSTER, ignored=True),
    _k("log.message.timestamp.type", S, "CreateTime", one_of("CreateTime", "LogAppendTime"),
       "Record timestamps: the producer's (CreateTime) or the broker's (LogAppendTime).", MEDIUM, CLUSTER),
    _k("log.message.timestamp.before.max.ms", L, LONG_MAX, _nonneg, "How far in the past a CreateTime "
       "timestamp may be.", MEDIUM, CLUSTER),
    _k("log.message.timestamp.after.max.ms", L, 3600000, _nonneg, "How far in the future a CreateTime "
       "timestamp may be.", MEDIUM, CLUSTER),
    _k("log.preallocate", B, False, None, "Preallocate segment files.", MEDIUM, CLUSTER, ignored=True),
    _k("message.max.bytes", I, 1048588, _nonneg, "Largest record batch a topic accepts.", HIGH, CLUSTER),
    _k("compression.type", S, "producer", one_of(*COMPRESSION_TYPES), "Codec batches are stored with; "
       "producer keeps the producer's.", HIGH, CLUSTER),
    _k("compression.gzip.level", I, -1, None, "gzip level when the broker compresses.", MEDIUM, CLUSTER),
    _k("compression.lz4.level", I, 9, between(1, 17), "lz4 level when the broker compresses.", MEDIUM, CLUSTER),
    _k("compression.zstd.level", I, 3, between(-131072, 22), "zstd level when the broker compresses.", MEDIUM,
       CLUSTER),
    _k("min.insync.replicas", I, 1, _pos, "Replicas that must have a write before acks=all is answered.",
       HIGH, CLUSTER),
    _k("unclean.leader.election.enable", B, False, None, "Allow an out-of-sync replica to lead.", HIGH, CLUSTER,
       ignored=True),
    _k("remote.log.storage.system.enable", B, False, _no_tiered_storage, "Tiered storage on this broker. "
       "Rivulet keeps every segment locally, so only false is accepted.", MEDIUM),
    _k("log.local.retention.ms", L, -2, at_least(-2), "With tiered storage, how long segments stay on local "
       "disk; -2 follows the retention time.", MEDIUM, CLUSTER, ignored=True),
    _k("log.local.retention.bytes", L, -2, at_least(-2), "With tiered storage, the local size limit of a "
       "partition; -2 follows the retention size.", MEDIUM, CLUSTER, ignored=True),
    # -- the broker's own log lines (not the partition logs of log.dirs), as Kafka's log4j settings
    _k("log.file", S, None, None, "A file the broker writes its log lines to instead of stderr, rotated by "
       "size (--log-file overrides it).", LOW),
    _k("log.file.max.bytes", L, 104857600, _nonneg, "Size at which log.file is rotated (log4j's "
       "MaxFileSize); 0 never rotates.", LOW),
    _k("log.file.backup.count", I, 10, _nonneg, "Rotated log files kept beside log.file, named with "
       "the suffixes .1 (the newest) to .N (log4j's MaxBackupIndex).", LOW),
    _k("request.log.threshold.ms", L, 1000, at_least(-1), "A request whose handling takes at least this long "
       "is logged at INFO by the rivulet.server.requests logger, with its API, version, client id, "
       "principal and timings, as Kafka's request log shows them; the time it waits in a purgatory (a long "
       "poll, acks=all, a rebalance) or behind earlier answers on its connection is shown but not counted. "
       "0 logs every request, -1 none; with that logger at debug every request is logged.", LOW),
    # -- network
    _k("socket.request.max.bytes", I, 104857600, _pos, "Largest request accepted; a larger one closes the "
       "connection.", HIGH),
    _k("connections.max.idle.ms", L, 600000, _pos, "Idle connections are closed after this long, "
       "also one whose request stopped arriving part-way.", MEDIUM),
    _k("max.request.partition.size.limit", I, 2000, _pos, "Most partitions a DescribeTopicPartitions "
       "answer holds; a larger request gets a cursor to the rest.", LOW),
    _k("max.connections", I, 2147483647, _nonneg, "Connections the broker keeps open at once; more are "
       "closed as they arrive.", MEDIUM, CLUSTER),
    _k("max.connections.per.ip", I, 2147483647, _nonneg, "Connections kept open from one IP address.", MEDIUM,
       CLUSTER),
    _k("max.connections.per.ip.overrides", S, "", None, "Per-host or per-IP exceptions to "
       "max.connections.per.ip, as host:limit pairs, comma-separated.", MEDIUM, CLUSTER),
    _k("queued.max.request.bytes", L, -1, None, "Bytes that requests being received or processed may hold "
       "at once, over all connections: a frame that does not fit in what is left waits, its connection not "
       "reading, until memory returns (one larger than the limit gets in alone). -1: no limit.", MEDIUM),
    # -- SASL (per listener as listener.name.<listener>.<property>, per mechanism as
    #    listener.name.<listener>.<mechanism>.<property>)
    _k("sasl.enabled.mechanisms", LS, ("GSSAPI",), None, "SASL mechanisms a SASL listener offers: PLAIN, "
       "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (Rivulet has no GSSAPI).", MEDIUM, PER_BROKER),
    _k("sasl.mechanism.inter.broker.protocol", S, "GSSAPI", None, "The SASL mechanism brokers use with each "
       "other when the inter-broker listener is SASL.", MEDIUM, PER_BROKER),
    _k("sasl.jaas.config", PW, None, None, "JAAS login module configuration; on a broker it is given per "
       "listener and mechanism: listener.name.<listener>.<mechanism>.sasl.jaas.config.", MEDIUM, PER_BROKER),
    _k("connections.max.reauth.ms", L, 0, _nonneg, "Longest SASL session before the client must "
       "re-authenticate (KIP-368); 0: no limit besides a token's own expiry.", MEDIUM),
    _k("sasl.server.callback.handler.class", CL, None, None, "The broker's SASL callback handler; "
       "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler validates "
       "OAUTHBEARER tokens as JWTs against sasl.oauthbearer.jwks.endpoint.url.", MEDIUM),
    # -- delegation tokens (KIP-48): served once a secret key is set
    _k("delegation.token.secret.key", PW, None, None, "Secret that signs delegation tokens (their HMAC); the "
       "same on every broker of a cluster. Not set: the token APIs answer DELEGATION_TOKEN_AUTH_DISABLED.",
       MEDIUM),
    _k("delegation.token.master.key", PW, None, None, "The secret key's earlier name, used when "
       "delegation.token.secret.key is not set.", LOW),
    _k("delegation.token.max.lifetime.ms", L, 604800000, _pos, "Longest life of a token, renewals "
       "included.", MEDIUM),
    _k("delegation.token.expiry.time.ms", L, 86400000, _pos, "How long a token lives before it must be "
       "renewed, and a renewal's longest period.", MEDIUM),
    _k("delegation.token.expiry.check.interval.ms", L, 3600000, _pos, "How often expired tokens are "
       "removed.", LOW),
    _k("sasl.server.max.receive.size", I, 524288, _pos, "Largest SASL token before authentication.", LOW),
    _k("sasl.oauthbearer.jwks.endpoint.url", S, None, None, "Where the JWT signing keys are: https://, "
       "http:// or file://.", MEDIUM),
    _k("sasl.oauthbearer.jwks.endpoint.refresh.ms", L, 3600000, _pos, "How often the keys are fetched "
       "again.", LOW),
    _k("sasl.oauthbearer.expected.audience", LS, (), None, "Audiences a token's aud must contain one of.",
       LOW),
    _k("sasl.oauthbearer.expected.issuer", S, None, None, "The iss a token must carry.", LOW),
    _k("sasl.oauthbearer.sub.claim.name", S, "sub", None, "The claim naming the principal.", LOW),
    _k("sasl.oauthbearer.scope.claim.name", S, "scope", None, "The claim holding the token's scopes.", LOW),
    _k("sasl.oauthbearer.clock.skew.seconds", I, 30, _nonneg, "Allowed difference between the broker's and "
       "the issuer's clocks.", LOW),
    _k("sasl.kerberos.service.name", S, None, None, "Kerberos service name (Rivulet has no GSSAPI).", MEDIUM,
       PER_BROKER, ignored=True),
    # -- client quotas (the quotas themselves are set with AlterClientQuotas)
    _k("quota.window.num", I, 11, _pos, "Samples kept to measure a client quota's rate (produce and fetch "
       "bytes, request time).", LOW),
    _k("quota.window.size.seconds", I, 1, _pos, "Time span of each client quota sample, in seconds.", LOW),
    # -- client telemetry (KIP-714; the subscriptions are CLIENT_METRICS config resources)
    _k("metric.reporters", LS, (), each_of(LAST_PUSH_RECEIVER, PROMETHEUS_TELEMETRY), "Metrics reporters. One that "
       "receives client telemetry makes the broker offer it to clients (ApiVersions lists KIP-714's APIs): "
       f"{PROMETHEUS_TELEMETRY} shows the metrics clients push on metrics.listener (which it needs), "
       f"{LAST_PUSH_RECEIVER} keeps each client's last push, for trying telemetry out.", LOW),
    _k("metrics.listener", S, "", _metrics_listener, "Where the broker serves its Prometheus metrics, as "
       "http://host:port (Rivulet's; Kafka's are JMX MBeans). Empty: no metrics endpoint, and requests are not "
       "timed.", LOW),
    # -- the schema registry (Confluent's REST API; docs/schema-registry.md)
    _k("schema.registry.listeners", LS, (), _registry_listeners, "Where the broker serves a schema registry with "
       "Confluent Schema Registry's REST API, as http://host:port or https://host:port (Confluent's listeners; "
       "the first one is served). Empty: no registry. It keeps its schemas in schema.registry.kafkastore.topic, "
       "read and written through this broker's first PLAINTEXT listener. Its callers are authorized with the "
       "broker's ACLs when the broker has an authorizer (docs/schema-registry.md).", LOW),
    _k("schema.registry.authentication.method", S, "NONE", one_of_ignoring_case("NONE", "BASIC"), "How the schema registry "
       "authenticates its callers (Confluent's authentication.method): BASIC takes HTTP basic credentials checked "
       "against the broker's SASL users (its SCRAM credentials and the PLAIN users of its listeners' JAAS "
       "configuration) and refuses a request without them (401), unless it came with a client certificate; NONE "
       "takes every caller as ANONYMOUS (or its client certificate's principal).", LOW),
    _k("schema.registry.ssl.client.authentication", S, "NONE", one_of_ignoring_case("NONE", "REQUESTED", "REQUIRED"),
       "An https schema registry listener's client certificates (Confluent's ssl.client.authentication): "
       "REQUIRED refuses a connection without one, REQUESTED asks; a certificate's principal is named by "
       "ssl.principal.mapping.rules. The listener's own key and trust stores are the broker's ssl.* settings.",
       LOW),
    _k("schema.registry.kafkastore.topic", S, "_schemas", None, "The compacted topic holding the "
       "schema registry's schemas, configs and modes (Confluent's kafkastore.topic).", LOW),
    _k("schema.registry.kafkastore.topic.replication.factor", I, 3, _pos, "Replicas of the schema registry's "
       "topic in a cluster (Confluent's kafkastore.topic.replication.factor); its creation waits up to a minute "
       "for that many brokers, then makes do with those there. A single broker keeps one.", LOW),
    # -- topics as Iceberg tables (a topic's iceberg.mode; docs/iceberg.md)
    _k("iceberg.catalog.type", S, "", one_of("", "sql", "rest"), "The kind of Iceberg catalog the tables of "
       "topics with iceberg.mode are registered in: sql (pyiceberg's SQL catalog: SQLite, PostgreSQL) or rest (an "
       "Iceberg REST catalog). Empty: rest if iceberg.catalog.uri is an http(s) URL, else sql.", LOW),
    _k("iceberg.catalog.uri", S, "", None, "The Iceberg catalog: for sql an SQLAlchemy URI "
       "(sqlite:////path/catalog.db, postgresql+psycopg2://user:password@host/db), for rest the catalog's base URL "
       "(http://host:8181). Empty: SQLite in iceberg/catalog.db under the first log dir. Brokers of a cluster must "
       "share one.", LOW),
    _k("iceberg.catalog.warehouse", S, "", None, "Where the tables' data and metadata files are written (a path "
       "or a URL such as file:// or s3://). Empty: iceberg/warehouse under the first log dir for sql; for rest, "
       "the warehouse the server gives (else the warehouse name or location it is asked for).", LOW),
    _k("iceberg.catalog.credential", PW, None, None, "A REST catalog's OAuth2 client credentials, "
       "client_id:client_secret, exchanged for a token at the catalog (pyiceberg's credential).", LOW),
    _k("iceberg.catalog.token", PW, None, None, "A bearer token sent to a REST catalog (pyiceberg's token).", LOW),
    _k("iceberg.translation.max.bytes", I, 16 * 1024 * 1024, _pos, "The most record bytes of a topic one "
       "translation reads from its partitions' logs into one commit; what bounds the memory a table's "
       "translation takes. A backlog larger than this is committed in several snapshots, one after another.",
       LOW),
    _k("iceberg.schema.registry.url", S, "", _registry_url, "The schema registry the schema iceberg.modes read "
       "the values' schemas from: the base URL of a Confluent-compatible registry (Confluent's schema.registry.url; "
       "https://user:password@host:port gives credentials too; https trusts the system's CAs or $SSL_CERT_FILE). "
       "Empty: this broker's own registry (schema.registry.listeners).", LOW),
    _k("iceberg.schema.registry.basic.auth.user.info", PW, None, None, "user:password sent with HTTP basic "
       "authentication to iceberg.schema.registry.url (Confluent's basic.auth.user.info).", LOW),
    _k("iceberg.schema.registry.ssl.ca.location", S, "", None, "A PEM file of the CA certificates that an https "
       "iceberg.schema.registry.url is checked against (Confluent's schema.registry.ssl.ca.location); empty: the "
       "system's trust.", LOW),
    _k("iceberg.schema.registry.ssl.certificate.location", S, "", None, "A PEM client certificate for mutual TLS "
       "with an https iceberg.schema.registry.url (its key in iceberg.schema.registry.ssl.key.location, or in "
       "this file).", LOW),
    _k("iceberg.schema.registry.ssl.key.location", S, "", None, "The PEM private key of "
       "iceberg.schema.registry.ssl.certificate.location.", LOW),
    _k("telemetry.max.bytes", I, 1048576, _pos, "Largest client telemetry push the broker accepts, compressed or "
       "not.", LOW),
    _k("replica.fetch.max.bytes", I, 1048576, _nonneg, "Bytes fetched per partition by a follower.", MEDIUM),
    # -- authorization (the ACLs themselves are set with CreateAcls and DeleteAcls)
    _k("authorizer.class.name", S, "", _authorizer, "The authorizer: Kafka's "
       "org.apache.kafka.metadata.authorizer.StandardAuthorizer or kafka.security.authorizer.AclAuthorizer "
       "(both give Rivulet's, with StandardAuthorizer's semantics). Empty: no authorization, every request is "
       "allowed.", LOW),
    _k("super.users", S, "", None, "Principals allowed everything whatever the ACLs say, separated by "
       "semicolons (User:admin;User:ops).", LOW),
    _k("allow.everyone.if.no.acl.found", B, False, None, "Whether a resource that no ACL applies to is open "
       "to every principal (else only to super users).", LOW),
    # -- replication (cluster mode)
    _k("replica.lag.time.max.ms", L, 30000, None, "A follower that has not caught up with the leader for "
       "this long leaves the ISR.", HIGH),
    _k("replica.fetch.wait.max.ms", I, 500, None, "Longest wait of a follower's fetch for data.", MEDIUM),
    _k("replica.fetch.min.bytes", I, 1, None, "Bytes a follower's fetch waits for.", MEDIUM),
    _k("replica.fetch.response.max.bytes", I, 10485760, _nonneg, "Largest fetch response a follower asks "
       "for.", MEDIUM),
    _k("replica.fetch.backoff.ms", I, 1000, _nonneg, "Pause of a follower's fetcher after a fetch error.",
       MEDIUM),
    _k("replica.socket.timeout.ms", I, 30000, None, "Request timeout of a follower's fetches.", HIGH),
    _k("replica.selector.class", S, None, _selector, "Which replica a consumer that names its rack "
       "(client.rack) reads from (KIP-392): org.apache.kafka.common.replica.RackAwareReplicaSelector picks "
       "one in its rack; unset or LeaderSelector, the leader.", MEDIUM),
    _k("fetch.max.bytes", I, 57671680, _nonneg, "Largest Fetch response.", MEDIUM),
    _k("max.incremental.fetch.session.cache.slots", I, 1000, _nonneg, "Fetch sessions (KIP-227) the broker keeps, "
       "in 8 shards of an eighth each (Kafka's); a full fetch that finds no room is answered session id 0.", MEDIUM),
    # -- group coordinator
    _k("group.initial.rebalance.delay.ms", I, 3000, _nonneg, "Wait for more members before the first "
       "rebalance of a new group.", MEDIUM),
    _k("group.min.session.timeout.ms", I, 6000, _nonneg, "Shortest session timeout a member may ask for.",
       MEDIUM),
    _k("group.max.session.timeout.ms", I, 1800000, _nonneg, "Longest session timeout a member may ask for.",
       MEDIUM),
    _k("group.max.size", I, 2147483647, _pos, "Most members in one classic group.", MEDIUM),
    # The defaults and bounds of the group configs (GROUP config resources, coordinator/group_config.py).
    _k("group.consumer.session.timeout.ms", I, 45000, _pos, "Session timeout of a consumer group member "
       "(consumer protocol); a group's consumer.session.timeout.ms overrides it.", MEDIUM),
    _k("group.consumer.min.session.timeout.ms", I, 45000, _pos, "Shortest consumer.session.timeout.ms.", MEDIUM),
    _k("group.consumer.max.session.timeout.ms", I, 60000, _pos, "Longest consumer.session.timeout.ms.", MEDIUM),
    _k("group.consumer.heartbeat.interval.ms", I, 5000, _pos, "Heartbeat interval given to consumer group "
       "members; a group's consumer.heartbeat.interval.ms overrides it.", MEDIUM),
    _k("group.consumer.min.heartbeat.interval.ms", I, 5000, _pos, "Shortest consumer.heartbeat.interval.ms.",
       MEDIUM),
    _k("group.consumer.max.heartbeat.interval.ms", I, 15000, _pos, "Longest consumer.heartbeat.interval.ms.",
       MEDIUM),
    _k("group.consumer.assignors", LS, ("uniform", "range"), each_of("uniform", "range"), "Server-side "
       "assignors of consumer groups, the first the default (a member picks one with group.remote.assignor).",
       MEDIUM),
    _k("group.consumer.max.size", I, 2147483647, _pos, "Most members in one consumer group.", MEDIUM),
    _k("group.consumer.migration.policy", S, "bidirectional",
       one_of_ignoring_case("disabled", "downgrade", "upgrade", "bidirectional"),
       "Online migration between the group protocols: a classic group becomes a consumer group when a "
       "member of the consumer protocol joins (upgrade), and back when its last one leaves (downgrade); "
       "bidirectional allows both, disabled neither.", MEDIUM),
    _k("group.consumer.assignment.interval.ms", I, 1000, _nonneg, "Minimum interval between two target "
       "assignment computations of a consumer group: a change sooner waits for a heartbeat after it, its "
       "members kept at the last target meanwhile. A group's consumer.assignment.interval.ms overrides it.",
       MEDIUM, CLUSTER),
    _k("group.consumer.min.assignment.interval.ms", I, 0, _nonneg, "Shortest "
       "consumer.assignment.interval.ms (the broker's and a group's).", MEDIUM),
    _k("group.consumer.max.assignment.interval.ms", I, 15000, _nonneg, "Longest "
       "consumer.assignment.interval.ms (the broker's and a group's).", MEDIUM),
    _k("group.share.assignment.interval.ms", I, 1000, _nonneg, "Minimum interval between two target "
       "assignment computations of a share group: a change sooner waits for a heartbeat after it, its "
       "members kept at the last target meanwhile. A group's share.assignment.interval.ms overrides it.",
       MEDIUM, CLUSTER),
    _k("group.share.min.assignment.interval.ms", I, 0, _nonneg, "Shortest "
       "share.assignment.interval.ms (the broker's and a group's).", MEDIUM),
    _k("group.share.max.assignment.interval.ms", I, 15000, _nonneg, "Longest "
       "share.assignment.interval.ms (the broker's and a group's).", MEDIUM),
    _k("group.streams.assignment.interval.ms", I, 1000, _nonneg, "Minimum interval between two target "
       "assignment computations of a streams group: a change sooner waits for it, its members answered "
       "ASSIGNMENT_DELAYED meanwhile. A group's streams.assignment.interval.ms overrides it.", MEDIUM, CLUSTER),
    _k("group.streams.min.assignment.interval.ms", I, 0, _nonneg, "Shortest "
       "streams.assignment.interval.ms (the broker's and a group's).", MEDIUM),
    _k("group.streams.max.assignment.interval.ms", I, 15000, _nonneg, "Longest "
       "streams.assignment.interval.ms (the broker's and a group's).", MEDIUM),
    _k("group.share.enable", B, True, None, "Serve share groups (KIP-932: ShareGroupHeartbeat, "
       "ShareGroupDescribe). Kafka serves them once the share.version feature is 1, as it is in a new 4.2+ "
       "cluster, and so does Rivulet; false (Kafka's own, internal switch) takes share.version 1 out of what "
       "this broker supports, and the share APIs are neither listed nor served.", MEDIUM),
    _k("group.share.max.size", I, 200, between(1, 1000), "Most members in one share group.", MEDIUM),
    _k("group.share.assignors", LS, ("simple",),
       each_of("simple", "org.apache.kafka.coordinator.group.assignor.SimpleAssignor"),
       "Server-side assignors of share groups: simple (Kafka's default, also by its class name).", MEDIUM),
    _k("group.share.session.timeout.ms", I, 45000, _pos, "Session timeout of a share group member; a group's "
       "share.session.timeout.ms overrides it.", MEDIUM),
    _k("group.share.min.session.timeout.ms", I, 45000, _pos, "Shortest share.session.timeout.ms.", MEDIUM),
    _k("group.share.max.session.timeout.ms", I, 60000, _pos, "Longest share.session.timeout.ms.", MEDIUM),
    _k("group.share.heartbeat.interval.ms", I, 5000, _pos, "Heartbeat interval of share group members; a group's "
       "share.heartbeat.interval.ms overrides it.", MEDIUM),
    _k("group.share.min.heartbeat.interval.ms", I, 5000, _pos, "Shortest share.heartbeat.interval.ms.", MEDIUM),
    _k("group.share.max.heartbeat.interval.ms", I, 15000, _pos, "Longest share.heartbeat.interval.ms.", MEDIUM),
    _k("group.share.record.lock.duration.ms", I, 30000, between(1000, 3600000), "Acquisition lock duration of a share "
       "group's records; a group's share.record.lock.duration.ms overrides it.", MEDIUM),
    _k("group.share.min.record.lock.duration.ms", I, 15000, between(1000, 30000), "Shortest "
       "share.record.lock.duration.ms.", MEDIUM),
    _k("group.share.max.record.lock.duration.ms", I, 60000, between(30000, 3600000), "Longest "
       "share.record.lock.duration.ms.", MEDIUM),
    _k("group.share.delivery.count.limit", I, 5, between(2, 10), "Delivery attempts of a share group's record "
       "before it is archived; a group's share.delivery.count.limit overrides it.", MEDIUM),
    _k("group.share.min.delivery.count.limit", I, 2, between(2, 5), "Smallest share.delivery.count.limit.", MEDIUM),
    _k("group.share.max.delivery.count.limit", I, 10, between(5, 25), "Largest share.delivery.count.limit.", MEDIUM),
    _k("group.share.partition.max.record.locks", I, 2000, between(100, 10000), "Record locks per share-partition: its "
       "in-flight records never exceed it (a stored batch is cut at it; Kafka hands out the whole batch). "
       "A group's share.partition.max.record.locks overrides it.", MEDIUM),
    _k("group.share.max.share.sessions", I, 2000, at_least(1), "The maximum number of share sessions per broker.",
       MEDIUM),
    _k("group.share.min.partition.max.record.locks", I, 100, between(100, 2000), "Smallest "
       "share.partition.max.record.locks.", MEDIUM),
    _k("group.share.max.partition.max.record.locks", I, 4000, between(2000, 10000), "Largest "
       "share.partition.max.record.locks.", MEDIUM),
    _k("group.streams.session.timeout.ms", I, 45000, _pos, "Session timeout of a streams group member.", MEDIUM),
    _k("group.streams.min.session.timeout.ms", I, 45000, _pos, "Shortest streams.session.timeout.ms.", MEDIUM),
    _k("group.streams.max.session.timeout.ms", I, 60000, _pos, "Longest streams.session.timeout.ms.", MEDIUM),
    _k("group.streams.heartbeat.interval.ms", I, 5000, _pos, "Heartbeat interval of streams group members.",
       MEDIUM),
    _k("group.streams.min.heartbeat.interval.ms", I, 5000, _pos, "Shortest streams.heartbeat.interval.ms.",
       MEDIUM),
    _k("group.streams.max.heartbeat.interval.ms", I, 15000, _pos, "Longest streams.heartbeat.interval.ms.",
       MEDIUM),
    _k("group.streams.num.standby.replicas", I, 0, _nonneg, "Standby replicas of each streams task.", MEDIUM),
    _k("group.streams.max.standby.replicas", I, 2, _nonneg, "Largest streams.num.standby.replicas.", MEDIUM),
    _k("group.streams.initial.rebalance.delay.ms", I, 3000, _nonneg, "How long a new (or emptied) streams group "
       "waits for more members before its first assignment; meanwhile its members get no tasks and the status "
       "ASSIGNMENT_DELAYED. A group's streams.initial.rebalance.delay.ms overrides it; 0: no delay.", MEDIUM),
    _k("offsets.topic.num.partitions", I, 50, _pos, "Partitions of __consumer_offsets.", HIGH),
    _k("offsets.topic.replication.factor", SH, 3, _pos, "Replication factor of __consumer_offsets.", HIGH),
    _k("offsets.topic.segment.bytes", I, 104857600, _pos, "Segment size of __consumer_offsets.", HIGH),
    _k("offsets.retention.minutes", I, 10080, _pos, "How long committed offsets of an empty group are kept.",
       HIGH),
    _k("offsets.retention.check.interval.ms", L, 600000, _pos, "How often expired offsets are removed.", HIGH),
    _k("offsets.commit.timeout.ms", I, 5000, _pos, "Longest wait for an offset commit to be written.", HIGH),
    _k("offset.metadata.max.bytes", I, 4096, _nonneg, "Largest metadata string of a committed offset.", HIGH),
    # -- transactions and producer ids
    _k("transaction.state.log.num.partitions", I, 50, _pos, "Partitions of __transaction_state.", HIGH),
    _k("transaction.max.timeout.ms", I, 900000, _pos, "Longest transaction timeout a producer may ask for.",
       HIGH),
    _k("transactional.id.expiration.ms", I, 604800000, _pos, "A transactional id unused this long is "
       "forgotten.", HIGH),
    _k("transaction.state.log.segment.bytes", I, 104857600, _pos, "Segment size of __transaction_state.", HIGH),
    _k("transaction.partition.verification.enable", B, True, None, "Check that a transactional write's "
       "partition was added to the transaction.", LOW, CLUSTER),
    _k("transaction.state.log.load.buffer.size", I, 5242880, _pos, "Read size when loading "
       "__transaction_state.", LOW),
    _k("transaction.abort.timed.out.transaction.cleanup.interval.ms", I, 10000, _pos, "How often timed-out "
       "transactions are aborted.", LOW),
    _k("transaction.remove.expired.transaction.cleanup.interval.ms", I, 3600000, _pos, "How often expired "
       "transactional ids are removed.", LOW),
    _k("producer.id.expiration.ms", I, 86400000, _pos, "A producer id idle this long loses its sequence "
       "state.", LOW, CLUSTER),
    _k("producer.id.expiration.check.interval.ms", I, 600000, _pos, "How often expired producer ids are "
       "removed.", LOW),
    _k("fetch.purgatory.purge.interval.requests", I, 1000, _pos, "Completed fetch waits between purges of "
       "the fetch purgatory.", MEDIUM),
    _k("producer.purgatory.purge.interval.requests", I, 1000, _pos, "Completed produce waits between purges "
       "of the produce purgatory.", MEDIUM),
    # -- accepted so a stock server.properties works; no effect in one Python process
    _k("num.network.threads", I, 3, _pos, "Network threads.", HIGH, CLUSTER, ignored=True),
    _k("num.io.threads", I, 8, _pos, "Request handler threads.", HIGH, CLUSTER, ignored=True),
    _k("background.threads", I, 10, _pos, "Background task threads.", HIGH, CLUSTER, ignored=True),
    _k("num.recovery.threads.per.data.dir", I, 2, _pos, "Recovery threads per data directory.", HIGH, CLUSTER,
       ignored=True),
    _k("num.replica.fetchers", I, 1, _pos, "Follower fetcher threads.", HIGH, CLUSTER, ignored=True),
    _k("queued.max.requests", I, 500, _pos, "Requests queued before network threads block.", HIGH,
       ignored=True),
    _k("socket.send.buffer.bytes", I, 102400, None, "SO_SNDBUF of client connections; -1: the OS default.", HIGH),
    _k("socket.receive.buffer.bytes", I, 102400, None, "SO_RCVBUF of client connections; -1: the OS default. "
       "It bounds what a client can queue ahead of the broker, so an overloaded broker pushes back on "
       "producers sooner and they batch.", HIGH),
    _k("socket.listen.backlog.size", I, 50, _pos, "The maximum number of pending connections on each listening "
       "socket (KIP-764); on Linux net.core.somaxconn also caps it.", MEDIUM),
    _k("auto.leader.rebalance.enable", B, True, None, "Cluster mode: the controller moves leadership back to "
       "preferred replicas when a broker leads too few of them.", HIGH),
    _k("leader.imbalance.check.interval.seconds", L, 300, _pos, "How often the controller checks the "
       "leader imbalance; also a few seconds after a preferred replica rejoins its ISR.", HIGH),
    _k("leader.imbalance.per.broker.percentage", I, 10, _nonneg, "The share of a broker's preferred "
       "partitions it may not lead before the controller rebalances them.", HIGH),
    _k("transaction.state.log.replication.factor", SH, 3, _pos, "Replication factor of __transaction_state.",
       HIGH, ignored=True),
    _k("transaction.state.log.min.isr", I, 2, _pos, "min.insync.replicas of __transaction_state.", HIGH,
       ignored=True),
    _k("share.coordinator.state.topic.num.partitions", I, 50, _pos, "Partitions of __share_group_state "
       "(should not change after deployment).", HIGH),
    _k("share.coordinator.state.topic.replication.factor", SH, 3, _pos, "Replication factor of "
       "__share_group_state.", HIGH),
    _k("share.coordinator.state.topic.min.isr", SH, 2, _pos, "min.insync.replicas of __share_group_state.",
       HIGH),
    _k("share.coordinator.state.topic.segment.bytes", I, 104857600, _pos, "Segment size of "
       "__share_group_state.", HIGH),
    _k("share.coordinator.state.topic.compression.codec", I, 0, None, "Compression codec id of the records "
       "the share coordinator writes.", HIGH),
    _k("share.coordinator.snapshot.update.records.per.snapshot", I, 500, between(0, 500), "ShareUpdate "
       "records the share coordinator writes for a share partition between two ShareSnapshot records.",
       MEDIUM),
    _k("share.coordinator.write.timeout.ms", I, 5000, _pos, "Longest wait for a share state write to reach "
       "every in-sync replica.", HIGH),
    _k("share.coordinator.load.buffer.size", I, 5242880, _pos, "Read size when loading "
       "__share_group_state.", HIGH),
    _k("share.coordinator.threads", I, 1, _pos, "Threads of the share coordinator (Rivulet runs it on the "
       "event loop).", MEDIUM, ignored=True),
    _k("share.coordinator.append.linger.ms", I, -1, at_least(-1), "How long share state writes wait to be "
       "batched (Rivulet appends each at once).", MEDIUM, ignored=True),
    _k("group.coordinator.rebalance.protocols", LS, ("classic", "consumer", "streams"), None, "Group protocols "
       "enabled (Rivulet implements classic).", MEDIUM, ignored=True),
    # -- ZooKeeper mode (Kafka 3.x's names): a cluster of brokers coordinated through ZooKeeper
    _k("zookeeper.connect", S, None, None, "ZooKeeper's host:port[,host:port...][/chroot]. When set, the "
       "broker joins a cluster through it (registration, an elected controller, replication); when not, "
       "it runs as a single node.", HIGH),
    _k("zookeeper.session.timeout.ms", I, 18000, _pos, "The ZooKeeper session timeout: a broker silent "
       "this long loses its registration (and its controllership); a broker that has not reached ZooKeeper "
       "this long stops leading the partitions whose followers it lost too. A broker restarted sooner waits, "
       "up to this plus 5 s, for its old registration to expire before it registers and listens.", HIGH),
    _k("zookeeper.connection.timeout.ms", I, None, None, "How long to wait for ZooKeeper at start-up; "
       "zookeeper.session.timeout.ms when not set.", HIGH),
    _k("zookeeper.max.in.flight.requests", I, 10, _pos, "Unacknowledged requests to ZooKeeper.", HIGH,
       ignored=True),
    _k("broker.rack", S, None, None, "The broker's rack, for rack-aware replica placement.", MEDIUM),
    _k("broker.id.generation.enable", B, True, None, "Generate a broker id through ZooKeeper "
       "(/brokers/seqid, above reserved.broker.max.id) when none is configured or stored.", MEDIUM),
    _k("reserved.broker.max.id", I, 1000, _nonneg, "The highest broker id that may be configured; "
       "generated ids start above it.", MEDIUM),
    _k("controlled.shutdown.enable", B, True, None, "Ask the controller to move leaderships away before "
       "the broker stops.", MEDIUM),
    _k("controlled.shutdown.max.retries", I, 3, None, "Attempts at a controlled shutdown before an "
       "unclean one (which still flushes the logs). An attempt fails at once while ZooKeeper is "
       "unreachable, so such a broker stops after about max.retries x retry.backoff.ms.", MEDIUM),
    _k("controlled.shutdown.retry.backoff.ms", L, 5000, None, "Wait between controlled-shutdown "
       "attempts.", MEDIUM),
    _k("controller.socket.timeout.ms", I, 30000, None, "Timeout of the controller's requests to brokers.",
       MEDIUM),
    _k("controller.quorum.voters", LS, (), None, "Controller quorum voters, id@host:port.", HIGH, ignored=True),
    _k("controller.quorum.bootstrap.servers", LS, (), None, "Controller quorum bootstrap addresses.", HIGH,
       ignored=True),
    _k("controller.quorum.election.timeout.ms", I, 1000, None, "Controller election timeout.", HIGH,
       ignored=True),
    _k("initial.broker.registration.timeout.ms", I, 60000, None, "Wait for the first controller "
       "registration.", MEDIUM, ignored=True),
    _k("metadata.log.dir", S, None, None, "Directory of the metadata log.", HIGH, ignored=True),
    _k("confluent.support.metrics.enable", B, False, None, "A Confluent Platform setting.", LOW, ignored=True),
    # -- the rest of Kafka 4.3.1's broker configs, so DescribeConfigs lists what Kafka lists and a
    #    Kafka server.properties starts. Types, defaults and checks are Kafka's; the table in
    #    docs/compatibility.md sorts them into honoured, refused unless at the default, and no effect.
    _k("offsets.load.buffer.size", I, 5242880, _pos, "Read size when loading __consumer_offsets (at least "
       "one whole batch).", HIGH),
    _k("offsets.topic.compression.codec", I, 0, _compression_codec, "Compression codec id (0 none, 1 gzip, "
       "2 snappy, 3 lz4, 4 zstd) of the records the group coordinator writes to __consumer_offsets.", HIGH),
    _k("group.streams.max.size", I, 2147483647, _pos, "Most members in one streams group; a member joining a "
       "full group gets GROUP_MAX_SIZE_REACHED.", MEDIUM),
    _k("controller.quota.window.num", I, 11, _pos, "Samples kept to measure controller_mutation_rate quotas "
       "(the token bucket's burst is samples x window x rate).", LOW),
    _k("controller.quota.window.size.seconds", I, 1, _pos, "Time span of each controller_mutation_rate sample, "
       "in seconds.", LOW),
    _k("connection.failed.authentication.delay.ms", I, 100, _nonneg, "How long the answer to a failed SASL "
       "authentication, and the connection's close after it, are held back (slowing password guessing); "
       "0: at once. Keep it below connections.max.idle.ms.", LOW),
    _k("principal.builder.class", CL, DEFAULT_PRINCIPAL_BUILDER, _principal_builder, "How a connection's "
       "principal is built: Rivulet has Kafka's default builder only (TLS subjects through "
       "ssl.principal.mapping.rules, SASL names as they are); any other class is refused.", MEDIUM, PER_BROKER),
    _k("create.topic.policy.class.name", CL, None, _no_java_plugin, "Kafka's CreateTopicPolicy plugin. "
       "Rivulet runs no Java plugins: only an empty value is accepted, so no policy is silently skipped.",
       LOW),
    _k("alter.config.policy.class.name", CL, None, _no_java_plugin, "Kafka's AlterConfigPolicy plugin. "
       "Rivulet runs no Java plugins: only an empty value is accepted.", LOW),
    _k("client.quota.callback.class", CL, None, _no_java_plugin, "Kafka's ClientQuotaCallback plugin. "
       "Rivulet runs no Java plugins: only an empty value is accepted (quotas are the configured ones).", LOW),
    _k("transaction.two.phase.commit.enable", B, False, _no_two_phase_commit, "Two-phase commit "
       "transactions with an external coordinator (KIP-939). Rivulet has none, so only false is accepted.",
       LOW),
    # Accepted without effect: settings of things Rivulet does another way or not at all.
    _k("config.providers", LS, (), None, "Kafka's ConfigProvider plugins for ${provider:key} values; Rivulet "
       "resolves no such references.", LOW, CLUSTER, ignored=True),
    _k("cordoned.log.dirs", LS, (), None, "Log dirs that take no new partitions (KIP-1066), each as written in "
       "log.dirs, or * for all of them; DescribeLogDirs v5 shows them cordoned. A single node whose dirs are all "
       "cordoned refuses new topics and partitions (INVALID_REPLICATION_FACTOR, Kafka's words). In a cluster the "
       "controller does not know of them: a replica it assigns here goes to a cordoned dir if no other is left; "
       "the coordinators' internal topics are made on one too.",
       MEDIUM, PER_BROKER),
    _k("early.start.listeners", LS, None, None, "Listeners opened before the authorizer is ready; Rivulet "
       "opens every listener once the broker is ready.", HIGH, ignored=True),
    _k("max.connection.creation.rate", I, 2147483647, _nonneg, "Broker-wide new connections per second "
       "(Kafka delays accepting beyond it). Per-IP rates (connection_creation_rate quotas) are honoured.",
       MEDIUM, CLUSTER, ignored=True),
    _k("request.timeout.ms", I, 30000, None, "Timeout of the broker's own requests to other brokers that Kafka "
       "sends with its own network clients: transaction markers, KIP-890's transaction checks, share state "
       "(replica fetches and the rest take replica.socket.timeout.ms).", HIGH),
    _k("socket.connection.setup.timeout.ms", L, 10000, None, "Connect timeout of the broker's own "
       "connections to other nodes.", MEDIUM, ignored=True),
    _k("socket.connection.setup.timeout.max.ms", L, 30000, None, "Largest connect timeout of the broker's "
       "own connections, after backoff.", MEDIUM, ignored=True),
    _k("replica.socket.receive.buffer.bytes", I, 65536, None, "SO_RCVBUF of a follower's connection to its "
       "leader.", HIGH, ignored=True),
    _k("replica.high.watermark.checkpoint.interval.ms", L, 5000, None, "How often high watermarks are "
       "written to disk; Rivulet writes them with the recovery points (log.flush.offset.checkpoint.interval.ms).",
       HIGH, ignored=True),
    _k("replication.quota.window.num", I, 11, _pos, "Samples of replication throttle rates (Rivulet has no "
       "replication throttles).", LOW, ignored=True),
    _k("replication.quota.window.size.seconds", I, 1, _pos, "Time span of each replication throttle "
       "sample.", LOW, ignored=True),
    _k("alter.log.dirs.replication.quota.window.num", I, 11, _pos, "Samples of the throttle of replica moves "
       "between log dirs.", LOW, ignored=True),
    _k("alter.log.dirs.replication.quota.window.size.seconds", I, 1, _pos, "Time span of each such "
       "sample.", LOW, ignored=True),
    _k("delete.records.purgatory.purge.interval.requests", I, 1, None, "Completed DeleteRecords waits "
       "between purges of their purgatory.", MEDIUM, ignored=True),
    _k("share.fetch.purgatory.purge.interval.requests", I, 1000, None, "Completed share fetch waits between "
       "purges of their purgatory.", MEDIUM, ignored=True),
    _k("add.partitions.to.txn.retry.backoff.ms", I, 20, _pos, "Backoff of the broker's retries when a "
       "transaction's coordinator answers a partition's check or add with CONCURRENT_TRANSACTIONS.", HIGH),
    _k("add.partitions.to.txn.retry.backoff.max.ms", I, 100, _nonneg, "Longest time those retries go on "
       "(at most request.timeout.ms); then the producer gets a retriable error.", HIGH),
    _k("log.dir.failure.timeout.ms", L, 30000, _pos, "KRaft: how long a broker tries to report a failed log "
       "dir to the controller before it stops.", LOW, ignored=True),
    _k("num.replica.alter.log.dirs.threads", I, None, None, "Threads moving replicas between log dirs.", HIGH,
       ignored=True),
    _k("group.coordinator.threads", I, 4, _pos, "Threads of the group coordinator (Rivulet runs it on the "
       "event loop).", HIGH, ignored=True),
    _k("group.coordinator.background.threads", I, 2, _pos, "Background threads of the group coordinator.",
       HIGH, ignored=True),
    _k("group.coordinator.append.linger.ms", I, -1, at_least(-1), "How long group coordinator writes wait to "
       "be batched (Rivulet appends each at once).", MEDIUM, ignored=True),
    _k("group.coordinator.cached.buffer.max.bytes", I, 1048588, at_least(524288), "Largest write buffer the "
       "group coordinator keeps for reuse.", MEDIUM, CLUSTER, ignored=True),
    _k("share.coordinator.cached.buffer.max.bytes", I, 1048588, at_least(524288), "Largest write buffer the "
       "share coordinator keeps for reuse.", MEDIUM, CLUSTER, ignored=True),
    _k("security.providers", S, None, None, "Java security providers.", LOW, ignored=True),
    _k("metrics.num.samples", I, 2, _pos, "Samples of Kafka's own metrics (Rivulet's are Prometheus "
       "metrics on metrics.listener).", LOW, ignored=True),
    _k("metrics.sample.window.ms", L, 30000, _pos, "Time span of each sample of Kafka's own metrics.", LOW,
       ignored=True),
    _k("metrics.recording.level", S, "INFO", one_of_ignoring_case("INFO", "DEBUG", "TRACE"), "The most "
       "detailed level of Kafka's own metrics recorded.", LOW, ignored=True),
    _k("kafka.metrics.reporters", LS, (), None, "Yammer metrics reporters.", LOW, ignored=True),
    _k("kafka.metrics.polling.interval.secs", I, 10, _pos, "Polling interval of Yammer metrics reporters.",
       LOW, ignored=True),
    # -- the broker's own SASL logins (Rivulet's inter-broker SASL takes PLAIN and SCRAM credentials
    #    from its JAAS configuration) and Kerberos (Rivulet has no GSSAPI)
    _k("sasl.client.callback.handler.class", CL, None, None, "A SASL client callback handler.", MEDIUM,
       ignored=True),
    _k("sasl.login.callback.handler.class", CL, None, None, "A SASL login callback handler.", MEDIUM,
       ignored=True),
    _k("sasl.login.class", CL, None, None, "A SASL Login implementation.", MEDIUM, ignored=True),
    _k("sasl.login.connect.timeout.ms", I, None, None, "Connect timeout to an OAuth token endpoint.", LOW,
       ignored=True),
    _k("sasl.login.read.timeout.ms", I, None, None, "Read timeout from an OAuth token endpoint.", LOW,
       ignored=True),
    _k("sasl.login.retry.backoff.ms", L, 100, None, "First wait between login attempts.", LOW, ignored=True),
    _k("sasl.login.retry.backoff.max.ms", L, 10000, None, "Longest wait between login attempts.", LOW,
       ignored=True),
    _k("sasl.login.refresh.window.factor", D, 0.8, None, "Share of a credential's life after which the login "
       "is refreshed.", MEDIUM, PER_BROKER, ignored=True),
    _k("sasl.login.refresh.window.jitter", D, 0.05, None, "Random jitter added to the refresh time.", MEDIUM,
       PER_BROKER, ignored=True),
    _k("sasl.login.refresh.min.period.seconds", SH, 60, None, "Shortest wait between two login refreshes.",
       MEDIUM, PER_BROKER, ignored=True),
    _k("sasl.login.refresh.buffer.seconds", SH, 300, None, "Time before a credential's expiry by which it is "
       "refreshed.", MEDIUM, PER_BROKER, ignored=True),
    _k("sasl.kerberos.kinit.cmd", S, "/usr/bin/kinit", None, "Kerberos kinit command.", MEDIUM, PER_BROKER,
       ignored=True),
    _k("sasl.kerberos.min.time.before.relogin", L, 60000, None, "Kerberos: wait between refresh attempts.",
       MEDIUM, PER_BROKER, ignored=True),
    _k("sasl.kerberos.ticket.renew.window.factor", D, 0.8, None, "Kerberos: share of a ticket's life after "
       "which it is renewed.", MEDIUM, PER_BROKER, ignored=True),
    _k("sasl.kerberos.ticket.renew.jitter", D, 0.05, None, "Kerberos: random jitter of the renewal time.",
       MEDIUM, PER_BROKER, ignored=True),
    _k("sasl.kerberos.principal.to.local.rules", LS, ("DEFAULT",), None, "Kerberos: rules mapping principal "
       "names to short names.", MEDIUM, PER_BROKER, ignored=True),
    _k("sasl.mechanism.controller.protocol", S, "GSSAPI", None, "KRaft: SASL mechanism towards the "
       "controllers.", HIGH, ignored=True),
    _k("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", L, 100, None, "First wait between attempts to fetch "
       "the JWKS.", LOW, ignored=True),
    _k("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", L, 10000, None, "Longest wait between attempts "
       "to fetch the JWKS.", LOW, ignored=True),
    _k("sasl.oauthbearer.token.endpoint.url", S, None, None, "OAuth: where the broker's own login gets its "
       "token.", MEDIUM, ignored=True),
    _k("sasl.oauthbearer.scope", S, None, None, "OAuth: scope asked for by the broker's own login.", MEDIUM,
       ignored=True),
    _k("sasl.oauthbearer.client.credentials.client.id", S, None, None, "OAuth: the broker login's client "
       "id.", MEDIUM, ignored=True),
    _k("sasl.oauthbearer.client.credentials.client.secret", PW, None, None, "OAuth: the broker login's "
       "client secret.", MEDIUM, ignored=True),
    _k("sasl.oauthbearer.jwt.retriever.class", CL, "org.apache.kafka.common.security.oauthbearer."
       "DefaultJwtRetriever", None, "OAuth: how the broker's own login gets its token.", MEDIUM, ignored=True),
    _k("sasl.oauthbearer.jwt.validator.class", CL, "org.apache.kafka.common.security.oauthbearer."
       "DefaultJwtValidator", None, "OAuth: how the broker's own login checks its token.", MEDIUM,
       ignored=True),
    _k("sasl.oauthbearer.assertion.algorithm", S, "RS256", one_of_ignoring_case("ES256", "RS256"), "OAuth "
       "(KIP-1139): signing algorithm of the login's JWT assertion.", MEDIUM, ignored=True),
    _k("sasl.oauthbearer.assertion.claim.aud", S, None, None, "OAuth: aud claim of the assertion.", MEDIUM,
       ignored=True),
    _k("sasl.oauthbearer.assertion.claim.iss", S, None, None, "OAuth: iss claim of the assertion.", MEDIUM,
       ignored=True),
    _k("sasl.oauthbearer.assertion.claim.sub", S, None, None, "OAuth: sub claim of the assertion.", MEDIUM,
       ignored=True),
    _k("sasl.oauthbearer.assertion.claim.exp.seconds", I, 300, between(0, 86400), "OAuth: the assertion's "
       "lifetime.", LOW, ignored=True),
    _k("sasl.oauthbearer.assertion.claim.nbf.seconds", I, 60, between(0, 3600), "OAuth: how far back the "
       "assertion's nbf is.", LOW, ignored=True),
    _k("sasl.oauthbearer.assertion.claim.jti.include", B, False, None, "OAuth: whether the assertion carries "
       "a jti.", MEDIUM, ignored=True),
    _k("sasl.oauthbearer.assertion.file", S, None, None, "OAuth: a ready-made assertion file.", MEDIUM,
       ignored=True),
    _k("sasl.oauthbearer.assertion.private.key.file", S, None, None, "OAuth: the assertion's signing key.",
       MEDIUM, ignored=True),
    _k("sasl.oauthbearer.assertion.private.key.passphrase", PW, None, None, "OAuth: that key's passphrase.",
       MEDIUM, ignored=True),
    _k("sasl.oauthbearer.assertion.template.file", S, None, None, "OAuth: a template of the assertion's "
       "header and claims.", MEDIUM, ignored=True),
    # -- KRaft (Rivulet's cluster mode is ZooKeeper's: one elected controller, no metadata quorum)
    _k("broker.heartbeat.interval.ms", I, 2000, None, "KRaft: interval of a broker's heartbeats to the "
       "controller.", MEDIUM, ignored=True),
    _k("broker.session.timeout.ms", I, 9000, None, "KRaft: a broker's lease without heartbeats.", MEDIUM,
       ignored=True),
    _k("controller.quorum.append.linger.ms", I, 25, _nonneg, "KRaft: the quorum leader's write linger.",
       MEDIUM, ignored=True),
    _k("controller.quorum.auto.join.enable", B, False, None, "KRaft: a controller joins the quorum by itself.",
       LOW, ignored=True),
    _k("controller.quorum.election.backoff.max.ms", I, 1000, _nonneg, "KRaft: longest backoff before a new "
       "election.", HIGH, ignored=True),
    _k("controller.quorum.fetch.max.bytes", I, 1048576, _pos, "KRaft: bytes per quorum Fetch.", LOW,
       ignored=True),
    _k("controller.quorum.fetch.snapshot.max.bytes", I, 1048576, _pos, "KRaft: bytes per FetchSnapshot.", LOW,
       ignored=True),
    _k("controller.quorum.fetch.timeout.ms", I, 2000, _nonneg, "KRaft: time without a fetch from the leader "
       "before an election.", HIGH, ignored=True),
    _k("controller.quorum.request.timeout.ms", I, 2000, _nonneg, "KRaft: quorum request timeout.", MEDIUM,
       ignored=True),
    _k("controller.quorum.retry.backoff.ms", I, 20, _nonneg, "KRaft: backoff of a failed quorum request.", LOW,
       ignored=True),
    _k("metadata.log.segment.bytes", I, 1073741824, at_least(8388608), "KRaft: metadata log segment size.",
       HIGH, ignored=True),
    _k("metadata.log.segment.ms", L, 604800000, None, "KRaft: metadata log segment age.", HIGH, ignored=True),
    _k("metadata.log.max.record.bytes.between.snapshots", L, 20971520, _pos, "KRaft: log bytes between "
       "metadata snapshots.", HIGH, ignored=True),
    _k("metadata.log.max.snapshot.interval.ms", L, 3600000, _nonneg, "KRaft: longest time between metadata "
       "snapshots.", HIGH, ignored=True),
    _k("metadata.max.idle.interval.ms", I, 500, _nonneg, "KRaft: interval of the controller's no-op "
       "records.", LOW, ignored=True),
    _k("metadata.max.retention.bytes", L, 104857600, None, "KRaft: size of the metadata log and snapshots "
       "kept.", HIGH, ignored=True),
    _k("metadata.max.retention.ms", L, 604800000, None, "KRaft: age of metadata log files and snapshots "
       "kept.", HIGH, ignored=True),
    # -- tiered storage (remote.log.storage.system.enable is refused but for false)
    _k("follower.fetch.last.tiered.offset.enable", B, False, None, "Tiered storage: an empty follower starts "
       "after the last tiered offset.", MEDIUM, CLUSTER, ignored=True),
    _k("remote.fetch.max.wait.ms", I, 500, _pos, "Tiered storage: longest wait of a remote fetch.", MEDIUM,
       CLUSTER, ignored=True),
    _k("remote.list.offsets.request.timeout.ms", L, 30000, _pos, "Tiered storage: timeout of a remote "
       "ListOffsets.", MEDIUM, CLUSTER, ignored=True),
    _k("remote.log.index.file.cache.total.size.bytes", L, 1073741824, _pos, "Tiered storage: local cache of "
       "remote indexes.", LOW, CLUSTER, ignored=True),
    _k("remote.log.manager.copier.thread.pool.size", I, 10, _pos, "Tiered storage: copier threads.", MEDIUM,
       CLUSTER, ignored=True),
    _k("remote.log.manager.expiration.thread.pool.size", I, 10, _pos, "Tiered storage: expiration threads.",
       MEDIUM, CLUSTER, ignored=True),
    _k("remote.log.manager.follower.thread.pool.size", I, 2, _pos, "Tiered storage: follower task threads.",
       MEDIUM, CLUSTER, ignored=True),
    _k("remote.log.manager.thread.pool.size", I, 2, _pos, "Tiered storage: the follower task threads' "
       "earlier name.", MEDIUM, ignored=True),
    _k("remote.log.manager.copy.max.bytes.per.second", L, LONG_MAX, _pos, "Tiered storage: copy rate cap.",
       MEDIUM, CLUSTER, ignored=True),
    _k("remote.log.manager.fetch.max.bytes.per.second", L, LONG_MAX, _pos, "Tiered storage: fetch rate cap.",
       MEDIUM, CLUSTER, ignored=True),
    _k("remote.log.manager.copy.quota.window.num", I, 11, _pos, "Tiered storage: copy quota samples.", MEDIUM,
       ignored=True),
    _k("remote.log.manager.copy.quota.window.size.seconds", I, 1, _pos, "Tiered storage: copy quota sample "
       "span.", MEDIUM, ignored=True),
    _k("remote.log.manager.fetch.quota.window.num", I, 11, _pos, "Tiered storage: fetch quota samples.",
       MEDIUM, ignored=True),
    _k("remote.log.manager.fetch.quota.window.size.seconds", I, 1, _pos, "Tiered storage: fetch quota sample "
       "span.", MEDIUM, ignored=True),
    _k("remote.log.manager.task.interval.ms", L, 30000, _pos, "Tiered storage: interval of the remote log "
       "manager's tasks.", LOW, ignored=True),
    _k("remote.log.metadata.custom.metadata.max.bytes", I, 128, _nonneg, "Tiered storage: largest custom "
       "metadata of a plugin.", LOW, ignored=True),
    _k("remote.log.metadata.manager.class.name", S, "org.apache.kafka.server.log.remote.metadata.storage."
       "TopicBasedRemoteLogMetadataManager", _non_empty, "Tiered storage: the metadata manager.", MEDIUM,
       ignored=True),
    _k("remote.log.metadata.manager.class.path", S, None, None, "Tiered storage: the metadata manager's class "
       "path.", MEDIUM, ignored=True),
    _k("remote.log.metadata.manager.impl.prefix", S, "rlmm.config.", _non_empty, "Tiered storage: prefix of "
       "the metadata manager's properties.", MEDIUM, ignored=True),
    _k("remote.log.metadata.manager.listener.name", S, None, _non_empty, "Tiered storage: the listener the "
       "metadata manager connects to.", MEDIUM, ignored=True),
    _k("remote.log.reader.threads", I, 10, _pos, "Tiered storage: remote read threads.", MEDIUM, CLUSTER,
       ignored=True),
    _k("remote.log.reader.max.pending.tasks", I, 100, _pos, "Tiered storage: queued remote reads.", MEDIUM,
       ignored=True),
    _k("remote.log.storage.manager.class.name", S, None, _non_empty, "Tiered storage: the storage manager.",
       MEDIUM, ignored=True),
    _k("remote.log.storage.manager.class.path", S, None, None, "Tiered storage: the storage manager's class "
       "path.", MEDIUM, ignored=True),
    _k("remote.log.storage.manager.impl.prefix", S, "rsm.config.", _non_empty, "Tiered storage: prefix of the "
       "storage manager's properties.", MEDIUM, ignored=True),
])

# Properties whose value is a comma-separated list (IncrementalAlterConfigs APPEND/SUBTRACT).
LIST_PROPERTIES = frozenset(k.name for k in BROKER_CONFIGS if k.type is ConfigType.LIST)

# The dynamic configs in Kafka 4.3.1's KafkaConfig definition order: DynamicConfig.Broker's ConfigDef
# defines them in that order and ConfigDef.parse walks it, so of several bad values in one
# AlterConfigs, Kafka names the first here, whatever the request's order.
KAFKA_DYNAMIC_ORDER = (
    "remote.log.index.file.cache.total.size.bytes", "remote.log.manager.copier.thread.pool.size",
    "remote.log.manager.expiration.thread.pool.size", "remote.log.manager.follower.thread.pool.size",
    "remote.log.reader.threads", "log.local.retention.ms", "log.local.retention.bytes",
    "remote.log.manager.copy.max.bytes.per.second", "remote.log.manager.fetch.max.bytes.per.second",
    "remote.fetch.max.wait.ms", "remote.list.offsets.request.timeout.ms", "message.max.bytes", "num.io.threads",
    "background.threads", "config.providers", "compression.type", "compression.gzip.level",
    "compression.lz4.level", "compression.zstd.level", "listeners", "listener.security.protocol.map",
    "max.connections.per.ip", "max.connections.per.ip.overrides", "max.connections",
    "max.connection.creation.rate", "num.network.threads", "num.replica.fetchers",
    "unclean.leader.election.enable", "follower.fetch.last.tiered.offset.enable",
    "group.coordinator.cached.buffer.max.bytes", "group.consumer.assignment.interval.ms",
    "group.share.assignment.interval.ms", "group.streams.assignment.interval.ms", "log.cleaner.threads",
    "log.cleaner.io.max.bytes.per.second", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.size",
    "log.cleaner.io.buffer.load.factor", "log.cleaner.backoff.ms", "log.cleaner.min.cleanable.ratio",
    "log.cleaner.delete.retention.ms", "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms",
    "cordoned.log.dirs", "log.segment.bytes", "log.roll.ms", "log.roll.jitter.ms", "log.retention.ms",
    "log.retention.bytes", "log.cleanup.policy", "log.index.size.max.bytes", "log.index.interval.bytes",
    "log.flush.interval.messages", "log.segment.delete.delay.ms", "log.flush.interval.ms", "log.preallocate",
    "num.recovery.threads.per.data.dir", "min.insync.replicas", "log.message.timestamp.type",
    "log.message.timestamp.before.max.ms", "log.message.timestamp.after.max.ms",
    "share.coordinator.cached.buffer.max.bytes", "transaction.partition.verification.enable",
    "producer.id.expiration.ms", "principal.builder.class", "ssl.provider", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "ssl.secure.random.implementation", "ssl.engine.factory.class",
    "sasl.mechanism.inter.broker.protocol", "sasl.enabled.mechanisms", "sasl.kerberos.principal.to.local.rules",
    "sasl.jaas.config", "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.min.time.before.relogin", "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter", "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.buffer.seconds",
)


# Properties that set one value in different units, most specific first (Kafka's broker
# config synonyms); DescribeConfigs lists them together.
_SYNONYM_GROUPS = [
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
]


def synonyms_of(name: str) -> tuple[str, ...]:
    """``name`` and the broker properties that stand in for it, most specific first."""
    if name == "log.flush.interval.ms":  # log.flush.scheduler.interval.ms is its default
        return ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")
    return next((g for g in _SYNONYM_GROUPS if name in g), (name,))


def _bounds(kind: str) -> list[tuple[str, Callable[[Any, Any], bool], str, str]]:
    """A ``group.<kind>.*`` heartbeat interval and session timeout within their bounds, the
    interval below the session, then the assignment interval within its bounds, as Kafka's
    GroupCoordinatorConfig orders and words them."""
    hb, session = f"group.{kind}.heartbeat.interval.ms", f"group.{kind}.session.timeout.ms"

    def within(value: str) -> list[tuple[str, Callable[[Any, Any], bool], str, str]]:
        name = value.removeprefix(f"group.{kind}.")
        lo, hi = f"group.{kind}.min.{name}", f"group.{kind}.max.{name}"
        return [(hi, operator.ge, lo, f"{hi} must be greater than or equal to {lo}"),
                (value, operator.ge, lo, f"{value} must be greater than or equal to {lo}"),
                (value, operator.le, hi, f"{value} must be less than or equal to {hi}")]

    return [*within(hb), *within(session), (hb, operator.lt, session, f"{hb} must be less than {session}"),
            *within(f"group.{kind}.assignment.interval.ms")]


# Kafka's start-up rules between two properties, in its order and words: its group coordinator's
# config first, then KafkaConfig's. (property, comparison, the property bounding it, message).
_GROUP_RELATIONS: tuple[tuple[str, Callable[[Any, Any], bool], str, str], ...] = (
    *_bounds("consumer"), *_bounds("share"), *_bounds("streams"),
    ("group.streams.num.standby.replicas", operator.le, "group.streams.max.standby.replicas",
     "group.streams.num.standby.replicas must be less than or equal to group.streams.max.standby.replicas"),
)
_RELATIONS: tuple[tuple[str, Callable[[Any, Any], bool], str, str], ...] = (
    ("replica.fetch.wait.max.ms", operator.le, "replica.socket.timeout.ms", "replica.socket.timeout.ms should "
     "always be at least replica.fetch.wait.max.ms to prevent unnecessary socket timeouts"),
    ("replica.fetch.wait.max.ms", operator.le, "replica.lag.time.max.ms", "replica.fetch.wait.max.ms should "
     "always be less than or equal to replica.lag.time.max.ms to prevent frequent changes in ISR"),
)


CLEANER_BUFFER_RULE = "log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread."


def cleaner_threads_problem(threads: int, dedupe_buffer_size: int) -> str | None:
    """KafkaConfig's rule on log.cleaner.threads and log.cleaner.dedupe.buffer.size, at start-up
    and on a dynamic change: what is wrong, or None. Its ConfigDef takes 0 threads (atLeast(0)),
    but the rule divides by it and Kafka 4.3 fails with "/ by zero"; here a line that names the
    property."""
    if threads < 1:
        return ("log.cleaner.threads must be at least 1 (Kafka's check that log.cleaner.dedupe.buffer.size "
                "is at least 1MB per cleaner thread divides by it)")
    return None if dedupe_buffer_size // threads > 1024 * 1024 else CLEANER_BUFFER_RULE


CORDON_ALL = "*"


def cordoned_dirs_problem(cordoned: Collection[str], log_dirs: Collection[str]) -> str | None:
    """KafkaConfig's rule on cordoned.log.dirs (KIP-1066), at start-up and on a dynamic change:
    each entry is one of the log dirs (as written there) or ``*``, all of them."""
    missing = [d for d in cordoned if d != CORDON_ALL and d not in log_dirs]
    return None if not missing else ("requirement failed: All entries in cordoned.log.dirs must be present in "
                                     f"log.dirs or log.dir. Missing entries : {', '.join(missing)}")


def _kafka_relations(cfg: BrokerConfig) -> Iterator[tuple[bool, str]]:
    """Kafka's start-up rules between properties: the group coordinator's, KafkaConfig's cleaner
    rule, its relations, then the two that are not one property against another. Lazy: a rule is
    checked once those before hold."""
    for prop, holds, bound, message in _GROUP_RELATIONS:
        yield holds(cfg[prop], cfg[bound]), message
    cleaner = cleaner_threads_problem(cfg["log.cleaner.threads"], cfg["log.cleaner.dedupe.buffer.size"])
    yield cleaner is None, cleaner or ""
    for prop, holds, bound, message in _RELATIONS:
        yield holds(cfg[prop], cfg[bound]), message
    queued = cfg["queued.max.request.bytes"]
    yield (queued <= 0 or queued >= cfg["socket.request.max.bytes"],
           "queued.max.request.bytes must be larger or equal to socket.request.max.bytes")
    yield (cfg["max.connections.per.ip"] != 0 or bool(cfg["max.connections.per.ip.overrides"]),
           "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set.")
    cordoned = cordoned_dirs_problem(cfg["cordoned.log.dirs"], cfg.log_dirs)
    yield cordoned is None, cordoned or ""


class BrokerConfig:
    """Typed access to broker properties: ``cfg["log.segment.bytes"]``."""

    def __init__(self, props: dict[str, str] | None = None) -> None:
        self.originals = dict(props or {})
        # listener.name.<listener>[.<mechanism>].<property>: (listener, mechanism or "") -> values
        self.listener_overrides: dict[tuple[str, str], dict[str, Any]] = {}
        plain = {}
        for name, raw in self.originals.items():
            if name.startswith(LISTENER_PREFIX):
                self._listener_override(name, raw)
            else:
                plain[name] = raw
        self._values: dict[str, Any] = BROKER_CONFIGS.parse(plain)
        self.listeners = [parse_listener(x) for x in self["listeners"]]
        adv = self["advertised.listeners"]
        self.advertised_listeners = [parse_listener(x) for x in adv] if adv else self.listeners
        # As Kafka: a listener can only be advertised if this broker opens it.
        bound_names = [n for n, _, _ in self.listeners]
        for name, _, _ in self.advertised_listeners:
            if name not in bound_names:
                raise ConfigError(f"advertised.listeners names listener {name}, which listeners does not define "
                                  f"(it defines {', '.join(bound_names) or 'none'}): advertised listener names "
                                  "must be among those in listeners")
        for name, host, port in self.advertised_listeners:
            if host in ("", "0.0.0.0", "::"):
                raise ConfigError(f"advertised listener {name} needs a concrete host, not '{host}'")
        controller = set(self["controller.listener.names"])
        # Controller listeners are never opened: one missing from the map is not an error here.
        self.security_protocols = listener_security_protocols(
            self["listener.security.protocol.map"], [n for n, _, _ in self.listeners], unopened=controller)
        for name, protocol in self.security_protocols.items():
            if name not in controller and protocol not in SERVED_PROTOCOLS:
                # Never serve plaintext on a port its operator named otherwise.
                raise ConfigError(f"listener {name} uses security protocol {protocol}, which Rivulet does "
                                  f"not serve yet: only {' and '.join(SERVED_PROTOCOLS)} listeners can be opened")
        if self.is_set("inter.broker.listener.name") and self.is_set("security.inter.broker.protocol"):
            raise ConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol "
                              "should be set.")
        names = {n for n, _, _ in self.advertised_listeners}
        if self.listeners and self.inter_broker_listener not in names | {n for n, _, _ in self.listeners}:
            if self.is_set("inter.broker.listener.name") or self.is_set("security.inter.broker.protocol") or \
                    self["zookeeper.connect"]:
                raise ConfigError(f"inter.broker.listener.name must be a listener name defined in "
                                  f"advertised.listeners: {self.inter_broker_listener} is not")
        if self["schema.registry.listeners"] and self.registry_client_listener() is None:
            raise ConfigError("schema.registry.listeners: the schema registry reads and writes its topic through a "
                              "PLAINTEXT listener, and listeners opens none")
        if PROMETHEUS_TELEMETRY in self["metric.reporters"] and not self["metrics.listener"]:
            raise ConfigError(f"metric.reporters: {PROMETHEUS_TELEMETRY} needs metrics.listener")
        for holds, rule in _kafka_relations(self):
            if not holds:
                raise ConfigError(rule)

    def _listener_override(self, name: str, raw: Any) -> None:
        listener, _, rest = name[len(LISTENER_PREFIX):].partition(".")
        mechanism = ""
        head, _, tail = rest.partition(".")
        if head.upper() in SASL_MECHANISMS and tail:
            mechanism, rest = head.upper(), tail
        key = BROKER_CONFIGS.get(rest)
        if not listener or key is None:
            raise ConfigError(f"unknown property '{name}'", name, raw, "unknown property")
        self.listener_overrides.setdefault((listener.lower(), mechanism), {})[rest] = key.parse(raw)

    def listener_value(self, listener: str, name: str, mechanism: str = "") -> Any:
        """A property as a listener (and mechanism) sees it: listener.name.<l>.<mechanism>.<name>,
        else listener.name.<l>.<name>, else <name> (Kafka's lookup order)."""
        for key in ((listener.lower(), mechanism.upper()), (listener.lower(), "")):
            values = self.listener_overrides.get(key)
            if values is not None and name in values:
                return values[name]
        return self[name]

    @property
    def inter_broker_listener(self) -> str:
        """The listener other brokers reach this one on (Kafka's interBrokerListenerName)."""
        name = self["inter.broker.listener.name"]
        return name.strip() if name else self["security.inter.broker.protocol"]

    def registry_client_listener(self) -> str | None:
        """The listener the schema registry's own clients use: the first PLAINTEXT one."""
        controller = set(self["controller.listener.names"])
        return next((n for n, _, _ in self.advertised_listeners
                     if n not in controller and self.security_protocols.get(n) == "PLAINTEXT"), None)

    def inter_broker_security_protocol(self) -> str:
        name = self.inter_broker_listener
        return self.security_protocols.get(name) or listener_security_protocols(
            self["listener.security.protocol.map"], [name]).get(name, "PLAINTEXT")

    def listener_props(self, listener: str) -> dict[str, Any]:
        """Every property as ``listener`` sees it: ``listener.name.<listener>.<prop>`` over the
        broker-wide value (Kafka's valuesWithPrefixOverride)."""
        out = {k.name: self[k.name] for k in BROKER_CONFIGS}
        out.update(self.listener_overrides.get((listener.lower(), ""), {}))
        return out

    def __getitem__(self, name: str) -> Any:
        if name in self._values:
            return self._values[name]
        return BROKER_CONFIGS[name].default

    def is_set(self, name: str) -> bool:
        return name in self._values

    @property
    def node_id(self) -> int:
        return self["broker.id"] if self.is_set("broker.id") and not self.is_set("node.id") else self["node.id"]

    @property
    def log_dirs(self) -> list[str]:
        return list(self["log.dirs"] or self["log.dir"])

    @property
    def retention_ms(self) -> int:
        if self["log.retention.ms"] is not None:
            return self["log.retention.ms"]
        if self["log.retention.minutes"] is not None:
            return self["log.retention.minutes"] * 60_000
        return self["log.retention.hours"] * 3_600_000

    @property
    def roll_ms(self) -> int:
        if self["log.roll.ms"] is not None:
            return self["log.roll.ms"]
        return self["log.roll.hours"] * 3_600_000

    def items(self) -> dict[str, Any]:
        """Every defined property with its effective value (broker.id is the node id, as in KRaft)."""
        return {k.name: self.node_id if k.name == "broker.id" else self[k.name] for k in BROKER_CONFIGS}


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SERVED_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
LISTENER_PREFIX = "listener.name."


def listener_security_protocols(protocol_map: str, names: list[str],
                                unopened: Collection[str] = ()) -> dict[str, str]:
    """Each listener name's security protocol, as Kafka resolves it: from
    ``listener.security.protocol.map``, else the name itself when it is a protocol's name."""
    mapping: dict[str, str] = {}
    for entry in filter(None, (e.strip() for e in (protocol_map or "").split(","))):
        name, sep, protocol = entry.partition(":")
        protocol = protocol.strip().upper()
        if not sep or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map entry '{entry}' is not NAME:PROTOCOL with "
                              f"PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}")
        mapping[name.strip().upper()] = protocol
    out = {}
    for name in names:
        key = name.upper()
        if key in mapping:
            out[name] = mapping[key]
        elif key in SECURITY_PROTOCOLS:
            out[name] = key
        elif name in unopened:
            out[name] = "PLAINTEXT"
        else:
            raise ConfigError(f"listener {name} is not in listener.security.protocol.map")
    return out


def parse_listener(spec: str) -> tuple[str, str, int]:
    """'PLAINTEXT://host:port' -> (name, host, port)."""
    if "://" not in spec:
        raise ConfigError(f"listener '{spec}' is not of the form NAME://host:port")
    name, rest = spec.split("://", 1)
    host, sep, port = rest.rpartition(":")
    if not sep:
        raise ConfigError(f"listener '{spec}' has no port")
    try:
        p = int(port)
    except ValueError:
        raise ConfigError(f"listener '{spec}' has a bad port") from None
    if not 0 <= p <= 65535:
        raise ConfigError(f"listener '{spec}' has a bad port")
    return name, host.strip("[]"), p


def load_properties(path: str | Path) -> dict[str, str]:
    """Read a Java-style server.properties file."""
    return _load_properties(path)


def help_text() -> str:
    """Every broker property with its type and default, for ``rivulet broker --help``."""
    lines = ["broker properties (Kafka's names; set with --config FILE or --override KEY=VALUE):"]
    for k in BROKER_CONFIGS:
        default = k.render(k.default)
        shown = "null" if default is None else default or '""'
        note = ", accepted without effect" if k.ignored else ""
        lines.append(f"  {k.name} = {shown}  ({k.type.name.lower()}, {k.update_mode.value}{note})")
    return "\n".join(lines)
