"""The iceberg.* topic configs: validation with Kafka's INVALID_CONFIG messages, DescribeConfigs
entries, and the partition spec's grammar."""

from __future__ import annotations

import pytest

from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.storage.config import LogConfig, SpecField, describe_topic_configs, parse_partition_spec

pytestmark = pytest.mark.fast


def test_defaults_leave_a_topic_without_a_table() -> None:
    c = LogConfig()
    assert (c.iceberg_mode, c.iceberg_target_lag_ms, c.iceberg_partition_spec, c.iceberg_invalid_record_action) == \
        ("none", 60_000, "(hour(timestamp))", "dlq")
    assert c.iceberg_snapshot_max_age_ms == 5 * 24 * 3600 * 1000  # Iceberg's own default age


def test_valid_settings_are_taken() -> None:
    c = LogConfig.from_props({"iceberg.mode": "key_value", "iceberg.target.lag.ms": "5000",
                              "iceberg.partition.spec": "(day(timestamp), bucket(16, key))",
                              "iceberg.invalid.record.action": "drop", "iceberg.snapshot.max.age.ms": "-1"})
    assert (c.iceberg_mode, c.iceberg_target_lag_ms, c.iceberg_invalid_record_action) == ("key_value", 5000, "drop")
    assert c.iceberg_snapshot_max_age_ms == -1
    for mode in ("value_schema_id_prefix", "value_schema_latest"):
        assert LogConfig.from_props({"iceberg.mode": mode}).iceberg_mode == mode


@pytest.mark.parametrize("name,raw,reason", [
    ("iceberg.mode", "tables", "String must be one of: none, key_value, value_schema_id_prefix, value_schema_latest"),
    ("iceberg.target.lag.ms", "0", "Value must be at least 1"),
    ("iceberg.target.lag.ms", "soon", "Not a number of type LONG"),
    ("iceberg.invalid.record.action", "keep", "String must be one of: drop, dlq"),
    ("iceberg.snapshot.max.age.ms", "-2", "Value must be at least -1"),
    ("iceberg.partition.spec", "hour(timestamp)", "a parenthesized list"),
    ("iceberg.partition.spec", "(hour(key))", "hour applies to timestamp only"),
    ("iceberg.partition.spec", "(bucket(0, key))", "positive width"),
    ("iceberg.partition.spec", "(truncate(4, timestamp))", "truncate does not apply to timestamp"),
    ("iceberg.partition.spec", "(day(timestamp), hour(timestamp))", "one transform only"),
    ("iceberg.partition.spec", "(value)", "unknown column 'value'"),
    ("iceberg.partition.spec", "(month(timestamp)", "unbalanced parentheses"),
    ("iceberg.partition.spec", "(sqrt(offset))", "unknown transform 'sqrt'"),
])
def test_invalid_values_are_invalid_config_naming_the_value_and_why(name: str, raw: str, reason: str) -> None:
    with pytest.raises(ApiError) as e:
        LogConfig.from_props({name: raw})
    assert e.value.code == ErrorCode.INVALID_CONFIG
    assert f"Invalid value {raw} for configuration {name}: " in str(e.value)
    assert reason in str(e.value)


def test_partition_spec_grammar() -> None:
    assert parse_partition_spec("(hour(timestamp))") == (SpecField("hour", "timestamp"),)
    assert parse_partition_spec(" ( ) ") == ()
    assert parse_partition_spec("(partition, truncate(4, key), bucket(8, offset))") == (
        SpecField("identity", "partition"), SpecField("truncate", "key", 4), SpecField("bucket", "offset", 8))


def test_describe_configs_lists_them_with_their_source() -> None:
    entries = {e.name: e for e in describe_topic_configs({"iceberg.mode": "key_value"}, LogConfig())}
    assert entries["iceberg.mode"].value == "key_value" and not entries["iceberg.mode"].is_default
    assert entries["iceberg.target.lag.ms"].value == "60000" and entries["iceberg.target.lag.ms"].is_default
    assert entries["iceberg.partition.spec"].value == "(hour(timestamp))"
    assert entries["iceberg.invalid.record.action"].value == "dlq"
