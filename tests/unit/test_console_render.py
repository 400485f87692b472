"""The console's pure parts: record bytes as text, JSON or hex, the lag chart, and the reset
form turned into `rivulet groups reset-offsets` arguments."""

from __future__ import annotations

import pytest

from rivulet.cli.console.backend import reset_args
from rivulet.cli.console.render import LagHistory, lag_chart, show_bytes

pytestmark = pytest.mark.fast


def test_text_json_and_hex() -> None:
    assert show_bytes(None, "text") == "null"
    assert show_bytes(None, "hex") == "null"
    assert show_bytes("héllo".encode(), "text") == "héllo"
    assert show_bytes(b"\xff\x00a", "text") == "\ufffd\x00a"
    assert show_bytes(b'{"a":[1,2],"b":"\xc3\xa9"}', "json") == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": "é"\n}'
    assert show_bytes(b"not json", "json") == "not json"
    assert show_bytes(b"", "hex") == ""
    assert show_bytes(bytes(range(10)), "hex") == "00010203 04050607 0809"


def test_lag_history_keeps_the_last_samples() -> None:
    h = LagHistory(size=3)
    for lag in (5, 4, 3, 2):
        h.add(lag)
    assert list(h.samples) == [4, 3, 2]


def test_lag_chart_scales_to_the_largest_sample() -> None:
    assert lag_chart([]) == ""
    assert lag_chart([7]) == ""
    svg = lag_chart([10, 5, 0], width=100, height=50)
    assert 'points="0.0,0.0 50.0,25.0 100.0,50.0"' in svg
    assert "at most 10" in svg
    # All zero: a flat line along the bottom, no division by zero.
    assert 'points="0.0,50.0 100.0,50.0"' in lag_chart([0, 0], width=100, height=50)


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
