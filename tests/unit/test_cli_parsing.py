"""The CLI's pure parsing: durations, offset files, KEY=VALUE lists, kcat's JSON envelope."""

from __future__ import annotations

import asyncio
import json

import pytest

from rivulet.cli.common import CliError, parse_kv
from rivulet.cli.consume import json_envelope
from rivulet.cli.groups import parse_duration_ms, read_offsets_file, share_in_flight
from rivulet.client.types import Message
from rivulet.common.types import TopicPartition as TP
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.messages import read_share_group_state_response as rsr

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


def _acl_args(*argv: str):
    import argparse

    from rivulet.cli import acls
    p = argparse.ArgumentParser()
    acls.add_parser(p.add_subparsers())
    return p.parse_args(["acls", *argv])


def test_acls_add_bindings():
    from rivulet.cli.acls import bindings_to_add
    from rivulet.security.acls import AclOperation as Op, AclPermissionType as Perm, PatternType, ResourceType as RT

    made = bindings_to_add(_acl_args("add", "--allow-principal", "User:a", "--operation", "alter-configs",
                                     "--operation", "describe-configs", "--topic", "t", "--cluster"))
    assert {(b.pattern.resource_type, b.pattern.name, b.entry.operation, b.entry.permission_type, b.entry.host)
            for b in made} == {(RT.TOPIC, "t", Op.ALTER_CONFIGS, Perm.ALLOW, "*"),
                               (RT.TOPIC, "t", Op.DESCRIBE_CONFIGS, Perm.ALLOW, "*"),
                               (RT.CLUSTER, "kafka-cluster", Op.ALTER_CONFIGS, Perm.ALLOW, "*"),
                               (RT.CLUSTER, "kafka-cluster", Op.DESCRIBE_CONFIGS, Perm.ALLOW, "*")}
    producer = bindings_to_add(_acl_args("add", "--deny-principal", "User:p", "--deny-host", "10.0.0.1", "--producer",
                                         "--idempotent", "--topic", "x-", "--resource-pattern-type", "prefixed"))
    assert {(b.pattern.resource_type, b.entry.operation) for b in producer} == {
        (RT.TOPIC, Op.WRITE), (RT.TOPIC, Op.DESCRIBE), (RT.TOPIC, Op.CREATE), (RT.CLUSTER, Op.IDEMPOTENT_WRITE)}
    assert all(b.entry.permission_type is Perm.DENY and b.entry.host == "10.0.0.1" for b in producer)
    assert {b.pattern.pattern_type for b in producer} == {PatternType.PREFIXED}
    for bad in (("add", "--operation", "read", "--topic", "t"), ("add", "--allow-principal", "User:a", "--topic", "t"),
                ("add", "--allow-principal", "User:a", "--operation", "read"),
                ("add", "--allow-principal", "User:a", "--operation", "fly", "--topic", "t"),
                # as kafka-acls: an operation that means nothing on the resource type (the broker would take it)
                ("add", "--allow-principal", "User:a", "--operation", "read", "--cluster")):
        with pytest.raises(CliError):
            bindings_to_add(_acl_args(*bad))


def test_acls_filters():
    from rivulet.cli.acls import filters_of
    from rivulet.security.acls import AclBindingFilter, AclOperation as Op, PatternType, ResourceType as RT

    assert filters_of(_acl_args("list")) == [AclBindingFilter()]
    assert filters_of(_acl_args("list", "--topic", "t", "--principal", "User:a")) == [
        AclBindingFilter(RT.TOPIC, "t", PatternType.LITERAL, "User:a")]
    assert len(filters_of(_acl_args("remove", "--group", "g", "--operation", "read", "--operation", "delete"))) == 2
    assert filters_of(_acl_args("list", "--operation", "all"))[0].operation is Op.ALL


def test_cluster_up_refuses_a_bad_log_level_before_starting_anything(tmp_path, capsys):
    from rivulet.cli.main import main

    assert main(["cluster", "up", "--dir", str(tmp_path / "c"), "--log-level", "info,rivulet=loud"]) == 2
    assert "--log-level: unknown log level 'loud'" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_share_in_flight_is_none_where_read_share_group_state_is_refused_or_there_is_no_state():
    """IN-FLIGHT: counted from the state batches, '-' (None) where the broker refuses
    ReadShareGroupState, as Apache Kafka does for a principal without CLUSTER_ACTION."""
    def result(start, *batches):
        return rsr.PartitionResult(partition=0, error_code=0, state_epoch=1, start_offset=start, state_batches=[
            rsr.StateBatch(first_offset=f, last_offset=la, delivery_state=st, delivery_count=1)
            for f, la, st in batches])

    class Admin:
        async def read_share_group_state(self, group_id, tps):
            assert group_id == "g"
            return {TP("t", 0): result(5, (5, 6, 2), (7, 9, 0)),
                    TP("t", 1): ApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                    TP("t", 2): ApiError(ErrorCode.UNSUPPORTED_VERSION),
                    TP("t", 3): rsr.PartitionResult(partition=3, error_code=0, state_epoch=0, start_offset=-1,
                                                    state_batches=[])}
    tps = [TP("t", p) for p in range(4)]
    assert asyncio.run(share_in_flight(Admin(), "g", tps)) == {TP("t", 0): 3, TP("t", 1): None, TP("t", 2): None,
                                                               TP("t", 3): None}
    assert asyncio.run(share_in_flight(Admin(), "g", [])) == {}


def test_a_command_gets_its_own_parser_only_and_parses_as_with_all_of_them():
    import subprocess
    import sys

    from rivulet.cli.main import COMMANDS, build_parser
    cases = [["broker", "--override", "a=b"], ["topics", "list", "--bootstrap-server", "h:1"],
             ["configs", "describe", "--entity-type", "topics", "--entity-name", "t"], ["groups", "list"]]
    for argv in cases:
        alone, full = vars(build_parser(argv[0]).parse_args(argv)), vars(build_parser().parse_args(argv))
        # (func may be a lambda made per parser: compared by its code)
        assert alone.pop("func").__code__ is full.pop("func").__code__ and alone == full, argv
    assert "configs" in COMMANDS["cluster"]
    # A broker starts without importing the administration commands' modules.
    probe = ("import sys; from rivulet.cli.main import build_parser; build_parser('broker'); "
             "print(sorted(m for m in sys.modules if m.startswith('rivulet.cli.')))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert "rivulet.cli.topics" not in loaded and "rivulet.cli.main" in loaded, loaded


def test_cluster_up_never_picks_a_port_a_member_was_asked_to_take(monkeypatch):
    """`cluster up --port 21990 --zookeeper-port 0`: the port chosen for ZooKeeper is never one a
    broker is then started on (a CI run saw ZooKeeper take the port the test had given broker-1)."""
    import argparse

    from rivulet.cli import local_cluster

    args = argparse.Namespace(zookeeper_port=0, port=21990, metrics_port=0, registry_port=None, brokers=2)
    asked = local_cluster._asked_ports(args)
    assert asked == {21990, 21991}
    offered = iter([21991, 21990, 30000])
    monkeypatch.setattr(local_cluster, "free_port", lambda: next(offered))
    assert local_cluster._port(0, asked) == 30000
    assert local_cluster._port(21990, asked) == 21990  # a port asked for is taken as asked
