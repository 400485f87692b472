"""Client quotas: Kafka's windowed rate, the throttle-time arithmetic, the precedence of quota
entities, and DescribeClientQuotas / AlterClientQuotas validation and persistence."""

from __future__ import annotations

import math

import pytest

from rivulet.common.time import MockClock
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.server.dynamic_config import DynamicBrokerConfig
from rivulet.server.quotas import (
    CLIENT_ID,
    DEFAULT,
    IP,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    USER,
    ClientQuotaManager,
    ClientQuotas,
    ManagerEntity,
    QuotaOp,
    Rate,
    java_round,
    throttle_time_ms,
)

pytestmark = pytest.mark.fast


# ------------------------------------------------------------ Rate
def test_rate_counts_a_first_burst_over_the_whole_window():
    r = Rate(samples=11, window_ms=1000)
    r.record(1000, 0)
    # Less than samples-1 full windows elapsed: the span is padded to 10 s.
    assert r.window_size_ms(0) == 10_000
    assert r.measure(0) == pytest.approx(100.0)
    assert r.window_size_ms(500) == 10_500
    assert r.measure(500) == pytest.approx(1000 / 10.5)


def test_rate_rolls_samples_and_forgets_old_ones():
    r = Rate(samples=11, window_ms=1000)
    for t in range(0, 20_000, 100):  # 10 units every 100 ms: 100 per second
        r.record(10, t)
    assert r.measure(20_000) == pytest.approx(100.0, rel=0.1)
    # After samples * window with no events every sample has expired.
    assert r.measure(20_000 + 11_000 + 2_000) == 0.0


def test_rate_window_size_after_many_windows_is_the_real_span():
    r = Rate(samples=3, window_ms=1000)
    for t in (0, 1000, 2000, 3000):
        r.record(1, t)
    # Three samples plus one spare slot; the one started at 0 expired (no event for
    # samples * window), so the span starts at 1000.
    assert r.window_size_ms(2900) == 2900
    assert r.window_size_ms(3500) == 2500


def test_throttle_time_brings_the_rate_back_to_the_bound():
    assert throttle_time_ms(200.0, 100.0, 10_000) == 10_000
    assert throttle_time_ms(150.0, 100.0, 10_000) == 5_000
    assert java_round(2.5) == 3 and java_round(-2.5) == -2


# ------------------------------------------------------------ one manager
def _manager(clock: MockClock | None = None) -> ClientQuotaManager:
    return ClientQuotaManager("Produce", 11, 1, clock or MockClock())


def test_no_quota_means_no_throttling_and_no_recording():
    m = _manager()
    assert not m.quotas_enabled()
    assert m.maybe_record_and_get_throttle_time_ms("ANONYMOUS", "c", 10**9, 0) == 0
    assert m.sensors == {}
    assert m.max_value_in_quota_window("ANONYMOUS", "c") == math.inf


def test_throttle_time_over_a_client_id_quota():
    m = _manager()
    m.update_quota(ManagerEntity(None, "c"), 1000.0)
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "c", 5000, 0) == 0   # 500 B/s over 10 s
    # 15000 B in a 10 s window is 1500 B/s: 50% over, so half the window.
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "c", 10000, 0) == 5000
    assert m.max_value_in_quota_window("ANONYMOUS", "c") == 10_000
    # Another client id has no quota and its own sensor.
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "other", 10**6, 0) == 0


def test_unrecord_takes_a_value_back():
    m = _manager()
    m.update_quota(ManagerEntity(None, DEFAULT), 1000.0)
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "c", 20_000, 0) > 0
    m.unrecord("ANONYMOUS", "c", 20_000, 0)
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "c", 1, 0) == 0


def test_request_quota_throttle_is_bounded_by_one_window():
    q = ClientQuotas(11, 1, MockClock())
    q.alter([([(USER, None)], [QuotaOp("request_percentage", 1.0, False)])])
    # 10 s of handler time at once: far over 1%, but at most one window of throttling.
    assert q.request.record_request_time("ANONYMOUS", "c", 10 * 10**9, 0) == 1000


@pytest.mark.parametrize("configured, expected", [
    ([(("alice", "c1"), 1), (("alice", DEFAULT), 2), (("alice", None), 3), ((DEFAULT, "c1"), 4),
      ((DEFAULT, DEFAULT), 5), ((DEFAULT, None), 6), ((None, "c1"), 7), ((None, DEFAULT), 8)], 1),
    ([(("alice", DEFAULT), 2), (("alice", None), 3), ((DEFAULT, "c1"), 4), ((None, "c1"), 7)], 2),
    ([(("alice", None), 3), ((DEFAULT, "c1"), 4), ((DEFAULT, DEFAULT), 5), ((None, DEFAULT), 8)], 3),
    ([((DEFAULT, "c1"), 4), ((DEFAULT, DEFAULT), 5), ((DEFAULT, None), 6), ((None, "c1"), 7)], 4),
    ([((DEFAULT, DEFAULT), 5), ((DEFAULT, None), 6), ((None, "c1"), 7)], 5),
    ([((DEFAULT, None), 6), ((None, "c1"), 7), ((None, DEFAULT), 8)], 6),
    ([((None, "c1"), 7), ((None, DEFAULT), 8), (("bob", None), 9)], 7),
    ([((None, DEFAULT), 8), (("bob", "c1"), 9)], 8),
    ([(("bob", None), 9)], None),
])
def test_precedence_of_quota_entities(configured, expected):
    m = _manager()
    for (user, client), bound in configured:
        m.update_quota(ManagerEntity(user, client), float(bound))
    assert m.quota("alice", "c1") == (None if expected is None else float(expected))


def test_sensor_sharing_follows_the_entity_that_applies():
    m = _manager()
    m.update_quota(ManagerEntity("alice", None), 100.0)
    assert m.metric_tags("alice", "c1") == m.metric_tags("alice", "c2") == ("alice", "")
    m.update_quota(ManagerEntity(None, DEFAULT), 50.0)
    # Both kinds configured: alice keeps her user-wide sensor, others count per client id.
    assert m.metric_tags("alice", "c1") == ("alice", "")
    assert m.metric_tags("bob", "c1") == ("", "c1")
    assert m.quota("bob", "c1") == 50.0


def test_a_changed_quota_applies_to_open_sensors():
    m = _manager()
    m.update_quota(ManagerEntity(None, "c"), 1000.0)
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "c", 9000, 0) == 0
    m.update_quota(ManagerEntity(None, "c"), 100.0)
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "c", 1, 0) > 0
    m.update_quota(ManagerEntity(None, "c"), None)
    assert not m.quotas_enabled()


# ------------------------------------------------------------ AlterClientQuotas / DescribeClientQuotas
def _codes(results):
    return [r.code if isinstance(r, ApiError) else r for r in results]


def test_alter_validation_as_kafka():
    q = ClientQuotas(11, 1, MockClock())
    ok = [QuotaOp("producer_byte_rate", 1024.0, False)]
    results = q.alter([
        ([], ok),
        ([("group", "g")], ok),
        ([(USER, "")], ok),
        ([(USER, "a"), (USER, "b")], ok),
        ([(USER, "a"), (IP, "1.2.3.4")], ok),
        ([(USER, "a")], [QuotaOp("no_such_quota", 1.0, False)]),
        ([(USER, "b")], [QuotaOp("producer_byte_rate", 1.5, False)]),
        ([(CLIENT_ID, "c")], [QuotaOp("producer_byte_rate", 1.0, False), QuotaOp("producer_byte_rate", 2.0, False)]),
        ([(IP, "1.2.3.4")], [QuotaOp("producer_byte_rate", 1.0, False)]),
        ([(IP, None)], [QuotaOp("connection_creation_rate", 10.0, False)]),
        ([(USER, "a"), (CLIENT_ID, None)], [QuotaOp("request_percentage", 12.5, False)]),
        ([(CLIENT_ID, None), (USER, "a")], [QuotaOp("request_percentage", 1.0, False)]),
    ])
    assert _codes(results) == [ErrorCode.INVALID_REQUEST] * 9 + [ErrorCode.NONE] * 2 + [ErrorCode.INVALID_REQUEST]
    assert [r.message for r in results if isinstance(r, ApiError)] == [
        "Invalid empty client quota entity",
        "Unhandled client quota entity type: group",
        "Empty user not supported",
        "Invalid client quota entity, duplicate entity entry user",
        "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
        "Invalid configuration key no_such_quota",
        "producer_byte_rate cannot be a fractional value.",
        "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=c})",  # a repeated key, as Kafka says
        "Invalid configuration key producer_byte_rate",
        "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=null, user=a})",
    ]
    assert q.request.quota("a", "anything") == 12.5
    more = q.alter([([(USER, "z")], [QuotaOp("request_percentage", 0.0, False)]),
                    ([(IP, "10.0.0.1")], [QuotaOp("connection_creation_rate", 2.0**31, False)]),
                    ([(USER, "z")], [QuotaOp("producer_byte_rate", 2.0**64, False)])])
    assert [r.message for r in more] == ["Quota request_percentage must be greater than 0",
                                         "Proposed value for connection_creation_rate is too large for an INT.",
                                         "Ignoring duplicate entity ClientQuotaEntity(entries={user=z})"]


def test_validate_only_changes_nothing():
    q = ClientQuotas(11, 1, MockClock())
    assert _codes(q.alter([([(USER, "a")], [QuotaOp("producer_byte_rate", 10.0, False)])], validate_only=True)) \
        == [ErrorCode.NONE]
    assert q.entities == {} and not q.produce.quotas_enabled()


def test_describe_match_types_and_strict():
    q = ClientQuotas(11, 1, MockClock())
    q.alter([
        ([(USER, "alice")], [QuotaOp("producer_byte_rate", 1.0, False)]),
        ([(USER, "alice"), (CLIENT_ID, "c1")], [QuotaOp("consumer_byte_rate", 2.0, False)]),
        ([(USER, None)], [QuotaOp("producer_byte_rate", 3.0, False)]),
        ([(CLIENT_ID, None)], [QuotaOp("request_percentage", 4.0, False)]),
        ([(IP, "10.0.0.1")], [QuotaOp("connection_creation_rate", 5.0, False)]),
    ])

    def names(components, strict=False):
        return sorted((e for e, _ in q.describe(components, strict)), key=str)

    assert len(names([])) == 5
    assert names([], strict=True) == []
    assert names([(USER, MATCH_EXACT, "alice")]) == [(("client-id", "c1"), ("user", "alice")), (("user", "alice"),)]
    assert names([(USER, MATCH_EXACT, "alice")], strict=True) == [(("user", "alice"),)]
    assert names([(USER, MATCH_DEFAULT, None)]) == [(("user", None),)]
    assert len(names([(USER, MATCH_SPECIFIED, None)])) == 3
    assert names([(USER, MATCH_SPECIFIED, None), (CLIENT_ID, MATCH_SPECIFIED, None)], strict=True) == \
        [(("client-id", "c1"), ("user", "alice"))]
    assert names([(IP, MATCH_SPECIFIED, None)]) == [(("ip", "10.0.0.1"),)]
    assert dict(q.describe([(CLIENT_ID, MATCH_DEFAULT, None)], True)[0][1]) == {"request_percentage": 4.0}


@pytest.mark.parametrize("components, code", [
    ([("", MATCH_EXACT, "x")], ErrorCode.INVALID_REQUEST),
    ([(USER, MATCH_EXACT, "a"), (USER, MATCH_DEFAULT, None)], ErrorCode.INVALID_REQUEST),
    ([("group", MATCH_EXACT, "g")], ErrorCode.UNSUPPORTED_VERSION),
    ([(USER, MATCH_EXACT, None)], ErrorCode.INVALID_REQUEST),
    ([(USER, MATCH_DEFAULT, "a")], ErrorCode.INVALID_REQUEST),
    ([(USER, MATCH_SPECIFIED, "a")], ErrorCode.INVALID_REQUEST),
    ([(USER, 7, None)], ErrorCode.INVALID_REQUEST),
    ([(IP, MATCH_SPECIFIED, None), (USER, MATCH_SPECIFIED, None)], ErrorCode.INVALID_REQUEST),
])
def test_describe_refuses_what_kafka_refuses(components, code):
    with pytest.raises(ApiError) as e:
        ClientQuotas(11, 1, MockClock()).describe(components, False)
    assert e.value.code == code


def test_quotas_survive_a_restart_beside_the_dynamic_configs(tmp_path):
    dyn = DynamicBrokerConfig(str(tmp_path), 1)
    dyn.replace("", {"log.retention.ms": "1000"})
    q = ClientQuotas(11, 1, MockClock(), store=dyn)
    q.alter([([(USER, None), (CLIENT_ID, "c")], [QuotaOp("producer_byte_rate", 2048.0, False)]),
             ([(CLIENT_ID, "gone")], [QuotaOp("consumer_byte_rate", 1.0, False)])])
    q.alter([([(CLIENT_ID, "gone")], [QuotaOp("consumer_byte_rate", 0.0, True)])])
    again = DynamicBrokerConfig(str(tmp_path), 1)
    assert again.levels[""] == {"log.retention.ms": "1000"}
    q2 = ClientQuotas(11, 1, MockClock(), store=again)
    assert q2.entities == {((CLIENT_ID, "c"), (USER, None)): {"producer_byte_rate": 2048.0}}
    assert q2.produce.quota("ANONYMOUS", "c") == 2048.0
    # A dynamic config change keeps the quotas in the file.
    again.replace("", {})
    assert ClientQuotas(11, 1, MockClock(), store=DynamicBrokerConfig(str(tmp_path), 1)).entities == q2.entities


def test_connection_creation_rate_per_ip():
    clock = MockClock()
    q = ClientQuotas(11, 1, clock)
    rates = q.connection_rates
    assert rates.throttle_ms("10.0.0.1") == 0  # no quota: nothing recorded
    q.alter([([(IP, None)], [QuotaOp("connection_creation_rate", 1.0, False)]),
             ([(IP, "10.0.0.2")], [QuotaOp("connection_creation_rate", 5.0, False)])])
    # The first window counts as 10 s: ten connections at once are within 1/s, the eleventh is not.
    assert [rates.throttle_ms("10.0.0.1") for _ in range(10)] == [0] * 10
    held = rates.throttle_ms("10.0.0.1")
    assert 0 < held <= 1000  # at most one window, as Kafka bounds it
    assert rates.throttle_ms("10.0.0.1") == held  # a refused connection is not counted
    assert all(rates.throttle_ms("10.0.0.2") == 0 for _ in range(50))  # its own override
    clock.sleep(1000)
    assert rates.throttle_ms("10.0.0.1") > 0  # still ten in the (at least 10 s) window
    clock.sleep(10_000)
    assert rates.throttle_ms("10.0.0.1") == 0  # those ten have expired
    q.alter([([(IP, None)], [QuotaOp("connection_creation_rate", 0.0, True)])])
    assert all(rates.throttle_ms("10.0.0.1") == 0 for _ in range(100))


# ------------------------------------------------------------ controller_mutation_rate (KIP-599)
def test_token_bucket_refills_at_the_rate_up_to_the_burst():
    from rivulet.server.quotas import TokenBucket
    b = TokenBucket()
    assert b.measure(2.0, 22.0, 0) == 22.0  # full at first
    b.record(30, 2.0, 22.0, 0)
    assert b.measure(2.0, 22.0, 0) == -8.0
    assert b.measure(2.0, 22.0, 5000) == 2.0
    assert b.measure(2.0, 22.0, 100_000) == 22.0


def test_mutation_quota_burst_comes_from_the_controller_quota_window():
    """controller.quota.window.num and .size.seconds size the controller_mutation_rate burst,
    not quota.window.*: 2/s over 3 samples of 2 s is 12 credits."""
    q = ClientQuotas(11, 1, MockClock(), controller_samples=3, controller_window_seconds=2)
    q.alter([([(CLIENT_ID, None)], [QuotaOp("controller_mutation_rate", 2.0, False)])])
    strict = q.controller_mutation.quota_for("ANONYMOUS", "c", strict=True)
    strict.record(13)  # 12 credits in hand: allowed, leaves -1 (with quota.window.*'s 22, 9 would be left)
    with pytest.raises(ApiError) as e:
        strict.record(1)
    assert e.value.code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert strict.throttle_time_ms() == 500  # 1 credit at 2/s


def test_strict_mutation_quota_refuses_while_in_debt_and_permissive_throttles():
    clock = MockClock()
    q = ClientQuotas(11, 1, clock)
    assert q.controller_mutation.quota_for("ANONYMOUS", "c", strict=True).throttle_time_ms() == 0
    q.alter([([(CLIENT_ID, None)], [QuotaOp("controller_mutation_rate", 2.0, False)])])
    strict = q.controller_mutation.quota_for("ANONYMOUS", "c", strict=True)
    strict.record(30)  # 22 credits (2/s over 11 s) in hand: allowed, leaves -8
    assert strict.throttle_time_ms() == 0
    with pytest.raises(ApiError) as e:
        strict.record(1)
    assert e.value.code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert e.value.message == "The throttling quota has been exceeded."
    assert strict.throttle_time_ms() == 4000  # 8 credits at 2/s
    clock.sleep(1000)
    assert strict.throttle_time_ms() == 3000
    permissive = q.controller_mutation.quota_for("ANONYMOUS", "c", strict=False)
    permissive.record(1)  # done anyway, and throttled
    assert permissive.throttle_time_ms() == 3500
    other = q.controller_mutation.quota_for("ANONYMOUS", "other-client", strict=True)
    other.record(5)  # its own bucket
    assert other.throttle_time_ms() == 0
