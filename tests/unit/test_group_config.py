"""Group configs: Kafka 4.3's names, defaults from the broker, validation and storage."""

from __future__ import annotations

import asyncio

import pytest

from rivulet.coordinator.group_config import GROUP_CONFIGS, GroupConfigError, GroupConfigs, validate_group_configs
from rivulet.server.config import BrokerConfig
from rivulet.server.dynamic_config import DynamicBrokerConfig

pytestmark = pytest.mark.fast

BROKER = BrokerConfig({}).items()


def refused(configs: dict) -> str:
    with pytest.raises(GroupConfigError) as e:
        validate_group_configs(configs, BROKER)
    return str(e.value)


def test_names_and_defaults_are_kafkas():
    assert GROUP_CONFIGS.defaults() == {
        "consumer.session.timeout.ms": 45000, "consumer.heartbeat.interval.ms": 5000,
        "consumer.assignment.interval.ms": 1000, "share.assignment.interval.ms": 1000,
        "streams.assignment.interval.ms": 1000,
        "share.session.timeout.ms": 45000, "share.heartbeat.interval.ms": 5000,
        "share.record.lock.duration.ms": 30000, "share.delivery.count.limit": 5,
        "share.partition.max.record.locks": 2000, "share.auto.offset.reset": "latest",
        "share.isolation.level": "read_uncommitted", "share.renew.acknowledge.enable": True,
        "streams.session.timeout.ms": 45000, "streams.heartbeat.interval.ms": 5000,
        "streams.num.standby.replicas": 0, "streams.initial.rebalance.delay.ms": 3000}


def test_validation_against_the_brokers_bounds():
    assert validate_group_configs({"consumer.session.timeout.ms": "60000"}, BROKER)["consumer.session.timeout.ms"] \
        == 60000
    assert refused({"consumer.session.timeout.ms": "60001"}) == \
        "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms"
    assert refused({"share.heartbeat.interval.ms": "4999"}) == \
        "share.heartbeat.interval.ms must be greater than or equal to group.share.min.heartbeat.interval.ms"
    assert refused({"share.record.lock.duration.ms": "999"}) == \
        "Invalid value 999 for configuration share.record.lock.duration.ms: Value must be at least 1000"
    assert refused({"streams.num.standby.replicas": "3"}) == \
        "streams.num.standby.replicas must be less than or equal to group.streams.max.standby.replicas"
    assert refused({"share.delivery.count.limit": "11"}).startswith("share.delivery.count.limit must be less")
    # KIP-1263's assignment intervals: at least 0 (the definition), then the broker's min/max (0, 15000)
    assert validate_group_configs({"consumer.assignment.interval.ms": "15000"}, BROKER)[
        "consumer.assignment.interval.ms"] == 15000
    assert refused({"consumer.assignment.interval.ms": "15001"}) == \
        "consumer.assignment.interval.ms must be less than or equal to group.consumer.max.assignment.interval.ms"
    assert refused({"share.assignment.interval.ms": "-1"}) == \
        "Invalid value -1 for configuration share.assignment.interval.ms: Value must be at least 0"
    assert refused({"streams.assignment.interval.ms": "20000"}) == \
        "streams.assignment.interval.ms must be less than or equal to group.streams.max.assignment.interval.ms"
    floor = {**BROKER, "group.share.min.assignment.interval.ms": 100}
    with pytest.raises(GroupConfigError, match="share.assignment.interval.ms must be greater than or equal to "
                                               "group.share.min.assignment.interval.ms"):
        validate_group_configs({"share.assignment.interval.ms": "99"}, floor)
    wide = {**BROKER, "group.consumer.min.session.timeout.ms": 1000, "group.consumer.max.heartbeat.interval.ms": 60000}
    with pytest.raises(GroupConfigError, match="consumer.session.timeout.ms must be greater than "
                                               "consumer.heartbeat.interval.ms"):
        validate_group_configs({"consumer.session.timeout.ms": "6000", "consumer.heartbeat.interval.ms": "6000"},
                               wide)


def test_names_types_and_enumerations():
    assert refused({"session.timeout.ms": "1"}) == "Unknown group config name: session.timeout.ms"
    assert "Not a number" in refused({"consumer.session.timeout.ms": "soon"})
    assert "read_committed" in refused({"share.isolation.level": "READ"})
    assert refused({"share.auto.offset.reset": None}).startswith("Null value not supported")
    for ok in ("earliest", "LATEST", "by_duration:PT1H", "by_duration:P1DT2H30M", "by_duration:PT0.5S"):
        validate_group_configs({"share.auto.offset.reset": ok}, BROKER)
    for bad in ("by_duration:", "by_duration:-PT1H", "by_duration:1h"):
        assert "by_duration" in refused({"share.auto.offset.reset": bad}), bad
    # Kafka 4.3.1's words
    assert refused({"share.auto.offset.reset": "none"}) == (
        "Invalid value none for configuration share.auto.offset.reset: Invalid value `none` for configuration "
        "share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the format "
        "'by_duration:<PnDTnHnMn.nS>'.")
    assert refused({"share.isolation.level": "sometimes"}) == ("Invalid value sometimes for configuration "
        "share.isolation.level: String must be one of: read_committed, read_uncommitted")


def test_values_in_force_take_the_brokers_defaults_and_survive_a_restart(tmp_path):
    broker = BrokerConfig({"group.consumer.heartbeat.interval.ms": "7000"}).items()
    store = DynamicBrokerConfig(str(tmp_path), 1)
    groups = GroupConfigs(broker, store)
    assert groups.get("g").consumer_heartbeat_interval_ms == 7000
    asyncio.run(groups.alter("g", {"consumer.session.timeout.ms": "50000", "share.isolation.level": "read_committed"}))
    asyncio.run(groups.alter("gone", {"share.delivery.count.limit": "3"}))
    asyncio.run(groups.alter("gone", {}))

    again = GroupConfigs(broker, DynamicBrokerConfig(str(tmp_path), 1))
    assert again.group_ids() == ["g"]
    got = again.get("g")
    assert (got.consumer_session_timeout_ms, got.consumer_heartbeat_interval_ms, got.share_isolation_level) == \
        (50000, 7000, "read_committed")
    assert again.get("other").consumer_session_timeout_ms == 45000


def test_a_groups_values_follow_each_change_of_its_overrides():
    groups = GroupConfigs(BrokerConfig({}).items())
    assert groups.get("g").share_record_lock_duration_ms == 30000
    asyncio.run(groups.alter("g", {"share.record.lock.duration.ms": "15000"}))
    assert groups.get("g").share_record_lock_duration_ms == 15000
    groups.set_group("g", {"share.record.lock.duration.ms": "20000"})  # changed elsewhere in a cluster
    assert groups.get("g").share_record_lock_duration_ms == 20000
    asyncio.run(groups.alter("g", {}))
    assert groups.get("g").share_record_lock_duration_ms == 30000


def test_a_consumer_groups_heartbeat_settings_take_its_own_configs():
    from rivulet.coordinator.consumer_heartbeat import ConsumerGroupConfig

    groups = GroupConfigs(BrokerConfig({"group.consumer.session.timeout.ms": "50000"}).items())
    asyncio.run(groups.alter("g", {"consumer.heartbeat.interval.ms": "6000", "consumer.assignment.interval.ms": "0"}))
    base = ConsumerGroupConfig(heartbeat_interval_ms=5000, session_timeout_ms=50000, assignors=("range",))
    assert groups.consumer_group_config("g", base) == ConsumerGroupConfig(
        heartbeat_interval_ms=6000, session_timeout_ms=50000, assignors=("range",), assignment_interval_ms=0)
    assert groups.consumer_group_config("other", base) == base


def test_the_brokers_assignment_intervals_change_at_run_time_within_their_bounds(tmp_path):
    # As Kafka 4.3.1: group.*.assignment.interval.ms are dynamic broker configs (at either level),
    # refused outside their static bounds (INVALID_REQUEST, its words); a change is the default of
    # every group without its own interval from then on, and a restart keeps it.
    from rivulet.protocol.errors import ApiError, ErrorCode
    static = BrokerConfig({}).items()
    dynamic = DynamicBrokerConfig(str(tmp_path), 1, static)
    groups = GroupConfigs(static, dynamic)
    dynamic.add_reconfigurable(groups)
    asyncio.run(groups.alter("own", {"share.assignment.interval.ms": "0"}))
    with pytest.raises(ApiError) as e:
        dynamic.validate({"group.consumer.assignment.interval.ms": "20000"})
    assert (e.value.code, e.value.message) == (ErrorCode.INVALID_REQUEST, "group.consumer.assignment.interval.ms "
                                               "must be less than or equal to group.consumer.max.assignment.interval.ms")
    with pytest.raises(ApiError) as e:
        dynamic.validate({"group.share.min.assignment.interval.ms": "5"}, per_broker=False)
    assert (e.value.code, e.value.message) == (
        ErrorCode.INVALID_REQUEST, "Cannot update these configs dynamically: [group.share.min.assignment.interval.ms]")
    dynamic.validate({"group.share.assignment.interval.ms": "500"}, per_broker=False)
    dynamic.replace("", {"group.share.assignment.interval.ms": "500"})
    assert groups.get("other").share_assignment_interval_ms == 500
    assert groups.get("own").share_assignment_interval_ms == 0
    assert groups.get("other").consumer_assignment_interval_ms == 1000
    again = GroupConfigs(static, DynamicBrokerConfig(str(tmp_path), 1, static))
    restarted = DynamicBrokerConfig(str(tmp_path), 1, static)
    restarted.add_reconfigurable(again)
    assert again.get("other").share_assignment_interval_ms == 500
