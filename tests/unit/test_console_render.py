"""The console's pure parts: record bytes as text, JSON or hex, a lag in time, the lag chart, the reset
form turned into `rivulet groups reset-offsets` arguments, and the ACL form into a binding."""

from __future__ import annotations

import pytest

from rivulet.cli.console.backend import acl_binding, reset_args, show_acl
from rivulet.cli.console.render import LagHistory, lag_chart, show_bytes, show_duration
from rivulet.common.types import TopicPartition as TP
from rivulet.security.acls import (
    AccessControlEntry,
    AclBinding,
    AclOperation as Op,
    AclPermissionType as Perm,
    PatternType as PT,
    ResourcePattern,
    ResourceType as RT,
)

pytestmark = pytest.mark.fast


def test_durations() -> None:
    assert [show_duration(ms) for ms in (None, 0, 4200, 59_999, 60_000, 185_000, 3_600_000, 7_800_000,
                                         90_000_000)] == \
        ["-", "0 s", "4.2 s", "60 s", "1 min 0 s", "3 min 5 s", "1 h 0 min", "2 h 10 min", "1 d 1 h"]


def test_text_json_and_hex() -> None:
    assert show_bytes(None, "text") == "null"
    assert show_bytes(None, "hex") == "null"
    assert show_bytes("héllo".encode(), "text") == "héllo"
    assert show_bytes(b"\xff\x00a", "text") == "\ufffd\x00a"
    assert show_bytes(b'{"a":[1,2],"b":"\xc3\xa9"}', "json") == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": "é"\n}'
    assert show_bytes(b"not json", "json") == "not json"
    assert show_bytes(b"", "hex") == ""
    assert show_bytes(bytes(range(10)), "hex") == "00010203 04050607 0809"


A0, A1, B0 = TP("a", 0), TP("a", 1), TP("b", 0)


def test_lag_history_keeps_the_last_samples() -> None:
    h = LagHistory(size=3)
    for lag in (5, 4, 3, 2):
        h.add({A0: lag, A1: 2 * lag})
    assert list(h.samples) == [{A0: 4, A1: 8}, {A0: 3, A1: 6}, {A0: 2, A1: 4}]


def test_lag_chart_draws_a_line_per_partition_scaled_to_the_largest_lag() -> None:
    assert lag_chart([]) is None
    assert lag_chart([{A0: 7}]) is None
    chart = lag_chart([{A0: 10, A1: 4}, {A0: 5, A1: 2}, {A0: 0, A1: 0}], width=100, height=50)
    assert chart is not None and chart.top == 10 and chart.left_out == 0
    assert [(line.tp, line.lags, line.last) for line in chart.lines] == [(A0, [10, 5, 0], 0), (A1, [4, 2, 0], 0)]
    assert chart.lines[0].path == "M0.0,0.0 L50.0,25.0 L100.0,50.0"
    assert chart.lines[1].path == "M0.0,30.0 L50.0,40.0 L100.0,50.0"
    assert chart.lines[0].color != chart.lines[1].color
    # All zero: flat lines along the bottom, no division by zero.
    (flat,) = lag_chart([{A0: 0}, {A0: 0}], width=100, height=50).lines
    assert flat.path == "M0.0,50.0 L100.0,50.0"


def test_lag_chart_leaves_a_gap_where_a_partition_had_no_commit() -> None:
    chart = lag_chart([{A0: 4}, {A0: 2, B0: 4}, {B0: 2}, {A0: 0, B0: 0}], width=30, height=40)
    a0, b0 = chart.lines
    assert a0.lags == [4, 2, None, 0] and a0.path == "M0.0,0.0 L10.0,20.0 M30.0,40.0"
    assert b0.lags == [None, 4, 2, 0] and b0.path == "M10.0,0.0 L20.0,20.0 L30.0,40.0"


def test_lag_chart_draws_the_laggiest_partitions_only() -> None:
    samples = [{TP("t", p): p for p in range(12)}, {TP("t", p): 11 - p for p in range(12)}]
    chart = lag_chart(samples, most=3)
    # The largest lag now first; in partition order on the chart.
    assert [line.tp.partition for line in chart.lines] == [0, 1, 2] and chart.left_out == 9
    assert chart.top == 11


def test_reset_form_as_command_arguments() -> None:
    a = reset_args("orders", "earliest", "")
    assert a.topic == ["orders"] and not a.all_topics and a.to_earliest and not a.to_latest
    a = reset_args(None, "latest", "")
    assert a.all_topics and a.topic == [] and a.to_latest
    assert reset_args("t", "offset", " 42 ").to_offset == 42
    a = reset_args("t", "shift", "-3")
    assert a.shift_by == -3 and a.to_offset is None
    assert reset_args("t", "datetime", "2026-01-31T12:00:00").to_datetime == "2026-01-31T12:00:00"
    with pytest.raises(ValueError, match="whole number"):
        reset_args("t", "offset", "ten")
    with pytest.raises(ValueError, match="date and time"):
        reset_args("t", "datetime", " ")
    with pytest.raises(ValueError, match="unknown reset strategy"):
        reset_args("t", "sideways", "")


def test_acl_form_as_a_binding() -> None:
    b = acl_binding("TOPIC", " orders ", "PREFIXED", " User:alice ", "", "describe_configs", "ALLOW")
    assert b == AclBinding(ResourcePattern(RT.TOPIC, "orders", PT.PREFIXED),
                           AccessControlEntry("User:alice", "*", Op.DESCRIBE_CONFIGS, Perm.ALLOW))
    assert show_acl(b) == "ALLOW User:alice from * to DESCRIBE_CONFIGS TOPIC orders (PREFIXED)"
    # The cluster has one name, so the form needs none.
    assert acl_binding("CLUSTER", "", "LITERAL", "User:x", "10.0.0.1", "ALTER", "DENY").pattern.name == "kafka-cluster"
    # The broker refuses what is not valid (INVALID_REQUEST); names that are no value at all stop here.
    with pytest.raises(ValueError, match="unknown AclOperation 'fly'"):
        acl_binding("TOPIC", "t", "LITERAL", "User:x", "*", "fly", "ALLOW")
    with pytest.raises(ValueError, match="unknown ResourceType"):
        acl_binding("", "t", "LITERAL", "User:x", "*", "READ", "ALLOW")
