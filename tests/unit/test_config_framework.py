"""The shared config framework: Kafka's parsing rules, one error naming each problem, the
.properties reader, and the broker and topic definitions built on it."""

from __future__ import annotations

import pytest

from rivulet.common.config import (
    ConfigDef,
    ConfigError,
    ConfigKey,
    ConfigSource,
    ConfigType,
    UpdateMode,
    at_least,
    load_properties,
)
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.server.config import BROKER_CONFIGS, DEFAULT_PRINCIPAL_BUILDER, KAFKA_DYNAMIC_ORDER, BrokerConfig
from rivulet.server.dynamic_config import DynamicBrokerConfig, describe_broker_configs
from rivulet.storage.config import TOPIC_CONFIGS

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("ctype,raw,value", [
    (ConfigType.BOOLEAN, " TRUE ", True),
    (ConfigType.BOOLEAN, "false", False),
    (ConfigType.BOOLEAN, True, True),
    (ConfigType.INT, " 42 ", 42),
    (ConfigType.LONG, "9223372036854775807", 2**63 - 1),
    (ConfigType.SHORT, "-3", -3),
    (ConfigType.INT, 7.0, 7),
    (ConfigType.DOUBLE, "0.25", 0.25),
    (ConfigType.LIST, " a, b ,,c ", ("a", "b", "c")),
    (ConfigType.LIST, "", ()),
    (ConfigType.LIST, ["x", " y"], ("x", "y")),
    (ConfigType.STRING, "  v ", "v"),
])
def test_values_parse_with_kafkas_rules(ctype, raw, value):
    assert ConfigKey("k", ctype).parse(raw) == value


@pytest.mark.parametrize("ctype,raw", [
    (ConfigType.BOOLEAN, "yes"),
    (ConfigType.INT, "2147483648"),
    (ConfigType.SHORT, "40000"),
    (ConfigType.INT, "1e3"),
    (ConfigType.INT, True),
    (ConfigType.INT, 2.5),
    (ConfigType.DOUBLE, "half"),
    (ConfigType.STRING, 5),
])
def test_bad_values_are_refused_with_the_name(ctype, raw):
    with pytest.raises(ConfigError) as e:
        ConfigKey("some.prop", ctype).parse(raw)
    assert e.value.name == "some.prop" and "some.prop" in str(e.value) and e.value.reason


def test_config_def_reports_every_problem_at_once():
    d = ConfigDef([ConfigKey("a", ConfigType.INT, 1, at_least(1)), ConfigKey("b", ConfigType.BOOLEAN, False)])
    assert d.parse({"a": "3"}) == {"a": 3}
    with pytest.raises(ConfigError) as e:
        d.parse({"a": "0", "b": "maybe", "c": "1"})
    assert [x.name for x in e.value.errors] == ["a", "b", "c"]
    assert "unknown property 'c'" in str(e.value) and "Value must be at least 1" in str(e.value)
    with pytest.raises(ValueError):
        d.define(ConfigKey("a", ConfigType.INT))


def test_properties_files_read_as_java_does(tmp_path):
    p = tmp_path / "server.properties"
    p.write_text("# comment\n! another\nnode.id=3\nlog.dirs : /a,\\\n   /b\nnum.partitions 4\n"
                 "key\\:with\\=seps = v\\tw\\u0041\n   spaced.key   =  x\n")
    assert load_properties(p) == {"node.id": "3", "log.dirs": "/a,/b", "num.partitions": "4",
                                  "key:with=seps": "v\twA", "spaced.key": "x"}
    props = load_properties(p)
    c = BrokerConfig({"log.dirs": props["log.dirs"], "num.partitions": props["num.partitions"]})
    assert c.log_dirs == ["/a", "/b"] and c["num.partitions"] == 4


def test_every_definition_is_documented_and_typed():
    for defs in (BROKER_CONFIGS, TOPIC_CONFIGS):
        for k in defs:
            assert k.doc and k.type is not ConfigType.UNKNOWN, k.name
            if k.default is not None:
                assert k.parse(k.render(k.default)) == k.default, k.name
    assert all(k.update_mode is UpdateMode.PER_TOPIC for k in TOPIC_CONFIGS)


def test_broker_entries_carry_type_and_read_only(tmp_path):
    config = BrokerConfig({"log.dirs": str(tmp_path), "log.retention.hours": "2"})
    dyn = DynamicBrokerConfig(str(tmp_path), 1)
    dyn.replace("", {"log.cleanup.policy": "compact", "custom.thing": "x"})
    dyn.replace("1", {"log.retention.ms": "5000"})
    entries = {e.name: e for e in describe_broker_configs(config, dyn, "1")}
    assert (entries["num.partitions"].config_type, entries["num.partitions"].read_only) == (ConfigType.INT, True)
    assert (entries["log.dirs"].config_type, entries["log.dirs"].value) == (ConfigType.LIST, str(tmp_path))
    ret = entries["log.retention.ms"]
    assert (ret.value, ret.source, ret.read_only) == ("5000", ConfigSource.DYNAMIC_BROKER_CONFIG, False)
    hours = entries["log.retention.hours"]
    assert (hours.value, hours.source, hours.read_only, hours.is_default) == \
        ("2", ConfigSource.STATIC_BROKER_CONFIG, True, False)
    assert hours.synonyms == (("log.retention.hours", "2", ConfigSource.STATIC_BROKER_CONFIG),
                              ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG))
    assert entries["log.cleanup.policy"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert entries["num.partitions"].is_default and entries["num.partitions"].documentation
    custom = entries["custom.thing"]
    assert custom.config_type == ConfigType.UNKNOWN and custom.sensitive and custom.value is None
    cluster = describe_broker_configs(config, dyn, "")
    assert [e.name for e in cluster] == ["custom.thing", "log.cleanup.policy"]


def test_dynamic_updates_follow_the_definitions(tmp_path):
    dyn = DynamicBrokerConfig(str(tmp_path), 1)
    dyn.validate({"log.retention.ms": "1", "listeners": "PLAINTEXT://h:1", "my.custom": "x"})
    with pytest.raises(ApiError) as e:
        dyn.validate({"num.partitions": "2", "log.dirs": "/x"})
    assert e.value.code == ErrorCode.INVALID_REQUEST and "[num.partitions, log.dirs]" in e.value.message  # a HashSet's order
    with pytest.raises(ApiError) as e:
        dyn.validate({"listeners": "PLAINTEXT://h:1"}, per_broker=False)
    assert e.value.code == ErrorCode.INVALID_REQUEST and "broker id must be specified" in e.value.message
    with pytest.raises(ApiError) as e:
        dyn.validate({"log.cleaner.backoff.ms": "-1"})
    assert e.value.code == ErrorCode.INVALID_REQUEST  # Kafka's broker wraps a failed validation so
    with pytest.raises(ApiError) as e:
        dyn.validate({"log.segment.bytes": "1048575"})
    assert (e.value.code, e.value.message) == (ErrorCode.INVALID_REQUEST, "Invalid value 1048575 for configuration "
                                               "log.segment.bytes: Value must be at least 1048576")


# Several bad values in one request, as a Kafka 4.3.1 broker answered each (in either request
# order): the first in its KafkaConfig definition order is named.
@pytest.mark.parametrize("configs, name, value, reason", [
    ({"num.io.threads": "x", "log.retention.ms": "y"}, "num.io.threads", "x", "Not a number of type INT"),
    ({"log.retention.ms": "y", "num.io.threads": "x"}, "num.io.threads", "x", "Not a number of type INT"),
    ({"log.cleaner.threads": "x", "message.max.bytes": "y"}, "message.max.bytes", "y", "Not a number of type INT"),
    ({"max.connections": "x", "compression.type": "nope", "min.insync.replicas": "z"}, "compression.type", "nope",
     "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ({"group.consumer.assignment.interval.ms": "x", "num.network.threads": "q"}, "num.network.threads", "q",
     "Not a number of type INT"),
])
def test_of_several_bad_dynamic_values_the_first_in_kafkas_definition_order_is_named(tmp_path, configs, name,
                                                                                     value, reason):
    with pytest.raises(ApiError) as e:
        DynamicBrokerConfig(str(tmp_path), 1).validate(configs)
    assert (e.value.code, e.value.message) == (ErrorCode.INVALID_REQUEST,
                                               f"Invalid value {value} for configuration {name}: {reason}")


def test_every_dynamic_broker_config_has_its_place_in_kafkas_definition_order():
    assert sorted(KAFKA_DYNAMIC_ORDER) == sorted(k.name for k in BROKER_CONFIGS if k.dynamic)


def test_cleaner_threads_change_within_kafkas_rule_then_the_cleaners(tmp_path):
    from rivulet.server.dynamic_config import ThreadCounts
    dyn = DynamicBrokerConfig(str(tmp_path), 1, BrokerConfig({"log.dirs": str(tmp_path)}).items())
    dyn.add_reconfigurable(ThreadCounts())
    with pytest.raises(ApiError) as e:
        dyn.validate({"log.cleaner.threads": "0"})
    assert (e.value.code, e.value.message) == (
        ErrorCode.INVALID_REQUEST, "log.cleaner.threads must be at least 1 (Kafka's check that "
        "log.cleaner.dedupe.buffer.size is at least 1MB per cleaner thread divides by it)")
    dyn.replace("1", {"log.cleaner.threads": "2"})
    dyn.replace("1", {"log.cleaner.threads": "4"})
    for default in ("0", "300"):  # a cluster default under this broker's 4: not in force here
        dyn.validate({"log.cleaner.threads": default}, per_broker=False)
    with pytest.raises(ApiError) as e:  # KafkaConfig's rule, before the cleaner's "more than double"
        dyn.validate({"log.cleaner.threads": "128"})
    assert (e.value.code, e.value.message) == (
        ErrorCode.INVALID_REQUEST, "requirement failed: log.cleaner.dedupe.buffer.size must be at least 1MB per "
        "cleaner thread.")
    with pytest.raises(ApiError) as e:
        dyn.validate({"log.cleaner.threads": "9"})
    assert "cannot be increased to more than double the current value 4" in e.value.message
    dyn.validate({"log.cleaner.threads": "8"})
    with pytest.raises(ApiError) as e:  # the buffer against the threads (a broker's configs are replaced whole)
        dyn.validate({"log.cleaner.threads": "4", "log.cleaner.dedupe.buffer.size": str(4 * 1024 * 1024)})
    assert (e.value.code, e.value.message) == (
        ErrorCode.INVALID_REQUEST, "requirement failed: log.cleaner.dedupe.buffer.size must be at least 1MB per "
        "cleaner thread.")
    dyn.validate({"log.cleaner.threads": "4", "log.cleaner.dedupe.buffer.size": str(4 * 1024 * 1024 + 4)})
    dyn.replace("", {"log.cleaner.dedupe.buffer.size": str(2 * 1024 * 1024)})  # cluster-wide: 2MB
    with pytest.raises(ApiError):  # this broker's own 2 threads against the cluster's buffer
        dyn.validate({"log.cleaner.threads": "2"})


def test_connection_limits_change_at_run_time(tmp_path):
    from rivulet.server.socket_server import ConnectionQuotas
    config = BrokerConfig({"log.dirs": str(tmp_path), "max.connections.per.ip": "5"})
    dyn = DynamicBrokerConfig(str(tmp_path), 1, config.items())
    quotas = ConnectionQuotas(0, 0, {})
    dyn.add_reconfigurable(quotas)  # takes the values in force at once
    assert (quotas.max_connections, quotas.per_ip, quotas.overrides) == (2147483647, 5, {})
    with pytest.raises(ApiError) as e:
        dyn.validate({"max.connections.per.ip.overrides": "10.0.0.1"}, per_broker=False)
    assert e.value.code == ErrorCode.INVALID_REQUEST and "host:limit" in e.value.message
    dyn.replace("", {"max.connections.per.ip.overrides": "10.0.0.1:2", "max.connections": "100"})
    assert (quotas.max_connections, quotas.per_ip, quotas.overrides) == (100, 5, {"10.0.0.1": 2})
    assert quotas.refusal("10.0.0.1") is None and quotas.refusal("10.0.0.1") is None
    assert "maximum of 2" in quotas.refusal("10.0.0.1")
    dyn.replace("", {})  # deleted: back to server.properties
    assert (quotas.max_connections, quotas.overrides) == (2147483647, {})


def test_topic_definitions_refuse_bad_values_as_invalid_config():
    from rivulet.storage import LogConfig
    with pytest.raises(ApiError) as e:
        LogConfig.from_props({"retention.ms": "soon"})
    assert e.value.code == ErrorCode.INVALID_CONFIG and "retention.ms" in e.value.message


@pytest.mark.parametrize("overrides,reported", [
    # Kafka's ConfigDef.parse reads them in LogConfig's definition order: the request's does not matter.
    ({"retention.ms": "soon", "segment.bytes": "1"}, "Invalid value 1 for configuration segment.bytes: "
     "Value must be at least 1048576"),
    ({"segment.bytes": "1", "retention.ms": "soon"}, "Invalid value 1 for configuration segment.bytes: "
     "Value must be at least 1048576"),
    ({"cleanup.policy": "bogus", "max.message.bytes": "-1", "iceberg.mode": "x"},
     "Invalid value -1 for configuration max.message.bytes: Value must be at least 0"),
    ({"iceberg.target.lag.ms": "0", "internal.segment.bytes": "x", "min.insync.replicas": "0"},
     "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"),
    # Names first (LogConfig.validateNames), then values.
    ({"retention.ms": "soon", "no.such.config": "1"}, "Unknown topic config name: no.such.config"),
])
def test_topic_configs_report_the_first_bad_value_in_kafkas_definition_order(overrides, reported):
    from rivulet.storage import LogConfig
    with pytest.raises(ApiError) as e:
        LogConfig.from_props(overrides)
    assert (e.value.code, e.value.message) == (ErrorCode.INVALID_CONFIG, reported)


def test_topic_configs_are_defined_in_kafkas_log_config_order():
    """The order ConfigDef.parse meets (and reports) bad values in: Kafka 4.3's LogConfig."""
    from rivulet.storage.config import INTERNAL_TOPIC_CONFIGS, TOPIC_CONFIGS
    ours = [n for n in (*TOPIC_CONFIGS.names(), *INTERNAL_TOPIC_CONFIGS.names()) if not n.startswith("iceberg.")]
    assert ours == [
        "segment.bytes", "segment.ms", "segment.jitter.ms", "segment.index.bytes", "flush.messages", "flush.ms",
        "retention.bytes", "retention.ms", "max.message.bytes", "index.interval.bytes", "delete.retention.ms",
        "min.compaction.lag.ms", "max.compaction.lag.ms", "file.delete.delay.ms", "min.cleanable.dirty.ratio",
        "cleanup.policy", "unclean.leader.election.enable", "min.insync.replicas", "compression.type",
        "compression.gzip.level", "compression.lz4.level", "compression.zstd.level", "preallocate",
        "message.timestamp.type", "message.timestamp.before.max.ms", "message.timestamp.after.max.ms",
        "leader.replication.throttled.replicas", "follower.replication.throttled.replicas", "remote.storage.enable",
        "local.retention.ms", "local.retention.bytes", "remote.log.copy.disable", "remote.log.delete.on.disable",
        "internal.segment.bytes",
    ]


def test_broker_help_lists_every_property_with_its_default(capsys):
    from rivulet.cli.main import build_parser
    with pytest.raises(SystemExit):
        build_parser().parse_args(["broker", "--help"])
    out = capsys.readouterr().out
    for k in BROKER_CONFIGS:
        assert k.name in out, k.name
    assert "log.segment.bytes" in out and "1073741824" in out


def test_committed_configuration_docs_are_up_to_date():
    import importlib.util
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("gen_config_docs", root / "tools" / "gen_config_docs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    text = gen.render()
    assert (root / "docs" / "configuration.md").read_text() == text, \
        "docs/configuration.md is out of date: run python tools/gen_config_docs.py"
    from rivulet.client.config import PROPS
    for name in [*BROKER_CONFIGS.names(), *TOPIC_CONFIGS.names(), *(p.name for p in PROPS)]:
        assert f"`{name}`" in text, name
    assert all(p.key.doc for p in PROPS)


def test_broker_synonyms_are_listed_as_kafka_lists_them(tmp_path):
    config = BrokerConfig({"log.dirs": str(tmp_path), "log.retention.hours": "2", "log.flush.interval.ms": "7"})
    dyn = DynamicBrokerConfig(str(tmp_path), 1)
    dyn.replace("1", {"log.retention.ms": "5000"})
    entries = {e.name: e for e in describe_broker_configs(config, dyn, "1")}
    assert entries["log.retention.ms"].synonyms == (
        ("log.retention.ms", "5000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("log.retention.hours", "2", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG))
    assert entries["log.retention.minutes"].synonyms == ()
    assert entries["log.retention.minutes"].value is None
    assert entries["log.flush.interval.ms"].synonyms[:2] == (
        ("log.flush.interval.ms", "7", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.flush.scheduler.interval.ms", str(2**63 - 1), ConfigSource.DEFAULT_CONFIG))
    assert entries["broker.id"].value == "1"


def test_topic_entries_name_a_dynamic_broker_default_as_their_source():
    from rivulet.storage import LogConfig, describe_topic_configs
    defaults = LogConfig.from_broker_props({"log.retention.hours": "2", "log.retention.ms": "5000"})
    levels = [({"log.retention.ms": "5000"}, ConfigSource.DYNAMIC_BROKER_CONFIG),
              ({}, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]
    entries = {e.name: e for e in describe_topic_configs({}, defaults, {"log.retention.hours": "2"}, levels)}
    ret = entries["retention.ms"]
    assert (ret.value, ret.source, ret.read_only) == ("5000", ConfigSource.DYNAMIC_BROKER_CONFIG, False)
    assert ret.synonyms[:2] == (("log.retention.ms", "5000", ConfigSource.DYNAMIC_BROKER_CONFIG),
                                ("log.retention.hours", "2", ConfigSource.STATIC_BROKER_CONFIG))


def test_an_unreadable_properties_file_is_a_config_error(tmp_path):
    p = tmp_path / "bad.properties"
    p.write_bytes(b"a=\\u12")
    with pytest.raises(ConfigError, match="bad.properties"):
        load_properties(p)
    p.write_bytes(b"a=\xff\xfe")
    with pytest.raises(ConfigError, match="UTF-8"):
        load_properties(p)
    with pytest.raises(OSError):
        load_properties(tmp_path / "missing.properties")


def test_tiered_storage_configs_are_reported_but_cannot_be_turned_on():
    from rivulet.storage import LogConfig, describe_topic_configs
    names = {e.name for e in describe_topic_configs({}, LogConfig())}
    assert {"remote.storage.enable", "local.retention.ms", "local.retention.bytes"} <= names
    assert LogConfig.from_props({"remote.storage.enable": "false", "local.retention.ms": "-2"}).local_retention_ms == -2
    with pytest.raises(ApiError) as e:
        LogConfig.from_props({"remote.storage.enable": "true"})
    assert e.value.code == ErrorCode.INVALID_CONFIG and "Tiered Storage" in e.value.message
    with pytest.raises(ConfigError, match="remote.log.storage.system.enable"):
        BrokerConfig({"remote.log.storage.system.enable": "true"})
    assert LogConfig.from_broker_props({"log.local.retention.ms": "5"}).local_retention_ms == 5


def test_a_broker_does_not_start_with_segments_below_kafka_4s_bound(tmp_path):
    assert BrokerConfig({"log.dirs": str(tmp_path), "log.segment.bytes": "1048576"})["log.segment.bytes"] == 1048576
    with pytest.raises(ConfigError) as e:
        BrokerConfig({"log.dirs": str(tmp_path), "log.segment.bytes": "1048575"})
    assert [(x.name, x.reason) for x in e.value.errors] == [("log.segment.bytes", "Value must be at least 1048576")]


def test_every_broker_config_kafka_describes_is_defined():
    """Kafka 4.3.1's DescribeConfigs of a broker (the Admin probe's golden line) lists 340 names;
    Rivulet defines each, so it lists them too and a Kafka server.properties starts."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from java_admin_probe import _broker_names, golden_lines
    kafka = _broker_names(golden_lines()["configs.broker.names"])
    assert len(kafka) == 340
    assert sorted(n for n in kafka if n not in BROKER_CONFIGS) == []


# Kafka 4.3.1's answers to IncrementalAlterConfigs (validateOnly) of this broker, recorded from the
# reference broker: INVALID_REQUEST with these messages (its broker wraps every refused dynamic
# broker config so, KAFKA-13609).
@pytest.mark.parametrize("level,name,value,message", [
    ("1", "follower.fetch.last.tiered.offset.enable", "abc", "Invalid value abc for configuration "
     "follower.fetch.last.tiered.offset.enable: Expected value to be either true or false"),
    ("1", "group.coordinator.cached.buffer.max.bytes", "1000", "Invalid value 1000 for configuration "
     "group.coordinator.cached.buffer.max.bytes: Value must be at least 524288"),
    ("1", "share.coordinator.cached.buffer.max.bytes", "1000", "Invalid value 1000 for configuration "
     "share.coordinator.cached.buffer.max.bytes: Value must be at least 524288"),
    ("1", "max.connection.creation.rate", "-1", "Invalid value -1 for configuration max.connection.creation.rate: "
     "Value must be at least 0"),
    ("1", "remote.fetch.max.wait.ms", "0", "Invalid value 0 for configuration remote.fetch.max.wait.ms: "
     "Value must be at least 1"),
    ("1", "remote.log.manager.copy.max.bytes.per.second", "0", "Invalid value 0 for configuration "
     "remote.log.manager.copy.max.bytes.per.second: Value must be at least 1"),
    ("1", "sasl.kerberos.ticket.renew.jitter", "abc", "Invalid value abc for configuration "
     "sasl.kerberos.ticket.renew.jitter: Not a number of type DOUBLE"),
    ("1", "sasl.login.refresh.min.period.seconds", "99999", "Invalid value 99999 for configuration "
     "sasl.login.refresh.min.period.seconds: Not a number of type SHORT"),
    ("1", "request.timeout.ms", "5000", "Cannot update these configs dynamically: [request.timeout.ms]"),
    ("", "cordoned.log.dirs", "/x", "Cannot update these configs at default cluster level, broker id must be "
     "specified: [cordoned.log.dirs]"),
    ("", "sasl.kerberos.kinit.cmd", "/bin/true", "Cannot update these configs at default cluster level, broker "
     "id must be specified: [sasl.kerberos.kinit.cmd]"),
])
def test_kafkas_other_broker_configs_are_refused_in_its_words(tmp_path, level, name, value, message):
    with pytest.raises(ApiError) as e:
        DynamicBrokerConfig(str(tmp_path), 1).validate({name: value}, per_broker=level != "")
    assert (e.value.code, e.value.message) == (ErrorCode.INVALID_REQUEST, message)


def test_kafkas_other_dynamic_broker_configs_take_good_values_at_their_levels(tmp_path):
    dyn = DynamicBrokerConfig(str(tmp_path), 1)
    dyn.validate({"max.connection.creation.rate": "10", "remote.log.reader.threads": "20", "config.providers": "x",
                  "principal.builder.class": DEFAULT_PRINCIPAL_BUILDER})
    dyn.validate({"max.connection.creation.rate": "10"}, per_broker=False)


@pytest.mark.parametrize("props,message", [
    ({"principal.builder.class": "com.example.MyBuilder"}, "Class com.example.MyBuilder could not be found. "
     f"Rivulet has {DEFAULT_PRINCIPAL_BUILDER} only"),
    ({"create.topic.policy.class.name": "com.example.Policy"}, "Class com.example.Policy could not be found. "
     "Rivulet runs no Java plugins"),
    ({"alter.config.policy.class.name": "com.example.Policy"}, "Class com.example.Policy could not be found. "
     "Rivulet runs no Java plugins"),
    ({"client.quota.callback.class": "com.example.Quotas"}, "Class com.example.Quotas could not be found. "
     "Rivulet runs no Java plugins"),
    ({"transaction.two.phase.commit.enable": "true"}, "Rivulet has no two-phase commit transactions (KIP-939)"),
    ({"offsets.topic.compression.codec": "9"}, "Unknown compression type id: 9"),
    ({"group.share.max.record.lock.duration.ms": "20000"}, "Value must be at least 30000"),
    ({"group.share.max.delivery.count.limit": "30"}, "Value must be no more than 25"),
    ({"sasl.oauthbearer.assertion.algorithm": "HS256"}, "String must be one of (case insensitive): ES256, RS256"),
    ({"remote.log.storage.manager.impl.prefix": ""}, "String must be non-empty"),
])
def test_what_rivulet_cannot_honour_is_refused_not_ignored(props, message):
    """A Java plugin, another principal builder or two-phase commit would change what the broker
    does: refused at start-up rather than accepted without effect. Kafka's ranges too."""
    with pytest.raises(ConfigError) as e:
        BrokerConfig(props)
    assert e.value.errors[0].reason == message


def test_kafkas_defaults_of_the_added_broker_configs():
    defaults = {k.name: k.render(k.default) for k in BROKER_CONFIGS}
    assert defaults["group.share.max.record.lock.duration.ms"] == "60000"
    assert defaults["group.share.max.partition.max.record.locks"] == "4000"
    assert defaults["principal.builder.class"] == DEFAULT_PRINCIPAL_BUILDER
    assert defaults["sasl.kerberos.principal.to.local.rules"] == "DEFAULT"
    assert defaults["connection.failed.authentication.delay.ms"] == "100"
    assert defaults["remote.log.manager.copy.max.bytes.per.second"] == "9223372036854775807"
    assert defaults["num.replica.alter.log.dirs.threads"] is None
    assert BrokerConfig({}).items()["controller.quota.window.num"] == 11


def test_cordoned_log_dirs_are_log_dirs_or_all_of_them():
    assert BrokerConfig({"log.dirs": "/d1,/d2", "cordoned.log.dirs": "/d2"})["cordoned.log.dirs"] == ("/d2",)
    assert BrokerConfig({"log.dirs": "/d1", "cordoned.log.dirs": "*"})["cordoned.log.dirs"] == ("*",)
    with pytest.raises(ConfigError) as e:
        BrokerConfig({"log.dirs": "/d1", "cordoned.log.dirs": "/d1,/x,/y"})
    assert str(e.value) == ("requirement failed: All entries in cordoned.log.dirs must be present in log.dirs or "
                            "log.dir. Missing entries : /x, /y")


class _ClusterStore:
    """A cluster's store of the dynamic broker config levels (ZooKeeper's, in memory)."""

    def __init__(self) -> None:
        self.levels: dict[str, dict[str, str]] = {}
        self.writes: list[tuple[str, dict[str, str], set[str]]] = []

    def load_broker_level(self, level: str) -> dict[str, str] | None:
        return dict(self.levels[level]) if level in self.levels else None

    def init_broker_level(self, level: str, configs: dict[str, str]) -> dict[str, str]:
        return dict(self.levels.setdefault(level, dict(configs)))

    def write_broker_level(self, level: str, configs: dict[str, str], altered) -> None:
        self.levels[level] = dict(configs)
        self.writes.append((level, dict(configs), set(altered)))


def test_a_cluster_keeps_both_levels_in_its_store_and_each_file_s_values_stay_in_force(tmp_path):
    """Brokers that kept the cluster default in their own files, differently, join a cluster
    store: the first seeds it; the second keeps its differing values as its own (but
    min.insync.replicas, cluster-level only); the files keep no levels; a change goes to the
    store naming what the request named, and one from the store is applied."""
    import json
    from rivulet.server.dynamic_config import FILE_NAME
    files = {1: {"": {"log.retention.ms": "1000", "min.insync.replicas": "2"}, "1": {}},
             2: {"": {"log.retention.ms": "2000", "log.roll.ms": "5000", "min.insync.replicas": "1"},
                 "2": {"background.threads": "12"}, "acls": []}}
    for node, doc in files.items():
        (tmp_path / str(node)).mkdir()
        (tmp_path / str(node) / FILE_NAME).write_text(json.dumps(doc))
    store = _ClusterStore()
    b1 = DynamicBrokerConfig(str(tmp_path / "1"), 1, shared=store)
    b2 = DynamicBrokerConfig(str(tmp_path / "2"), 2, shared=store)
    assert store.levels == {"": {"log.retention.ms": "1000", "min.insync.replicas": "2"},
                            "2": {"log.retention.ms": "2000", "log.roll.ms": "5000", "background.threads": "12"}}
    assert b1.effective() == {"log.retention.ms": "1000", "min.insync.replicas": "2"}
    assert b2.effective() == {"log.retention.ms": "2000", "log.roll.ms": "5000", "background.threads": "12",
                              "min.insync.replicas": "2"}
    for node in files:
        assert json.loads((tmp_path / str(node) / FILE_NAME).read_text()) == {}
    assert DynamicBrokerConfig(str(tmp_path / "2"), 2, shared=store).levels == b2.levels  # a restart: the store's
    b1.replace("", {"log.retention.ms": "1000", "min.insync.replicas": "2"}, named=["min.insync.replicas"])
    assert store.writes[-1] == ("", {"log.retention.ms": "1000", "min.insync.replicas": "2"}, {"min.insync.replicas"})
    assert b2.apply_shared("", {"log.retention.ms": "9", "min.insync.replicas": "3"})
    assert b2.effective()["min.insync.replicas"] == "3" and b2.effective()["log.retention.ms"] == "2000"
    assert not b2.apply_shared("1", {"log.retention.ms": "1"})  # another broker's level


def test_a_new_cluster_s_first_broker_writes_the_cluster_level_min_isr(tmp_path):
    store = _ClusterStore()
    DynamicBrokerConfig(str(tmp_path), 1, BrokerConfig({"log.dirs": str(tmp_path), "min.insync.replicas": "2"}).items(),
                        shared=store)
    assert store.levels == {"": {"min.insync.replicas": "2"}} and not (tmp_path / "dynamic-broker-configs.json").exists()
