"""The CLI's pure parsing: durations, offset files, KEY=VALUE lists, kcat's JSON envelope."""

from __future__ import annotations

import json

import pytest

from rivulet.cli.common import CliError, parse_kv
from rivulet.cli.consume import json_envelope
from rivulet.cli.groups import parse_duration_ms, read_offsets_file
from rivulet.client.types import Message

pytestmark = pytest.mark.fast


def test_parse_duration_ms():
    assert parse_duration_ms("PT1H") == 3_600_000
    assert parse_duration_ms("P1DT2H3M4.5S") == ((24 + 2) * 60 + 3) * 60_000 + 4500
    assert parse_duration_ms("pt0.25s") == 250
    for bad in ("1h", "P", "PT", "P1H", ""):
        with pytest.raises(ValueError):
            parse_duration_ms(bad)


def test_read_offsets_file(tmp_path):
    f = tmp_path / "o.csv"
    f.write_text("t,0,5\nt,1,7\n\ng,u,0,3\n")
    assert read_offsets_file(str(f)) == {"": {("t", 0): 5, ("t", 1): 7}, "g": {("u", 0): 3}}
    f.write_text("t,0\n")
    with pytest.raises(ValueError, match="o.csv:1"):
        read_offsets_file(str(f))


def test_parse_kv():
    assert parse_kv(["a=1", " b = x=y "], "--set") == {"a": "1", "b": "x=y"}
    with pytest.raises(CliError, match="--set expects key=value, got 'a'"):
        parse_kv(["a"], "--set")


def test_json_envelope_matches_kcat_layout():
    m = Message("t", 3, 42, b"k", b"v\xff", [("h", b"1"), ("n", None)], 1, 1700000000000)
    out = json_envelope(m, 7)
    assert out.startswith(b'{"topic":"t","partition":3,"offset":42,"tstype":"create","ts":1700000000000,"broker":7,')
    assert out.endswith(b'"headers":["h","1","n",null],"key":"k","payload":"v\xff"}')
    bare = json.loads(json_envelope(Message("t", 0, 0, None, b"x", None, 2, 5), -1))
    assert "headers" not in bare and bare["key"] is None and bare["tstype"] == "logappend"
