"""`rivulet cluster info` (and `up|status|down`, in cli/local_cluster.py), `configs describe|alter`, `offsets get` and `delete-records`:
everyday administration in the manner of rpk and Kafka's tools, over the admin client.

`configs` covers topic and broker configs and, as kafka-configs does, client quotas: the
entity types users, clients and ips (or `--user`, `--client`, `--ip` and their
`--*-defaults`, combinable as user and client), with Describe/AlterClientQuotas."""

from __future__ import annotations

import argparse
import asyncio
from typing import Awaitable, Callable

from rivulet.cli.common import CliError, add_connection_args, client_config, parse_kv, run_command
from rivulet.cli.groups import topic_partitions
from rivulet.cli.output import Column, add_format_arg, print_json, print_table
from rivulet.client.admin.client import RESOURCE_CLIENT_METRICS, RESOURCE_GROUP_CONFIG, AsyncAdminClient, ResourceType
from rivulet.client.admin.client import ClientQuotaAlteration, ClientQuotaAlterationOp, ClientQuotaEntity
from rivulet.client.admin.client import ClientQuotaFilter, ClientQuotaFilterComponent
from rivulet.client.core import EARLIEST, LATEST
from rivulet.common.config import ConfigSource
from rivulet.common.logs import LOG_FORMATS
from rivulet.common.types import TopicPartition as TP
from rivulet.protocol.messages import describe_configs_response as dcr


def _run(name: str, args: argparse.Namespace, work: Callable[[AsyncAdminClient], Awaitable[int]]) -> int:
    async def go() -> int:
        admin = AsyncAdminClient(client_config(args, **{"client.id": "rivulet-admin"}))
        try:
            return await work(admin)
        finally:
            await admin.close()
    return run_command(name, args, lambda: asyncio.run(go()))


async def _cluster_info(admin: AsyncAdminClient, args: argparse.Namespace) -> int:
    md = await admin.describe_cluster()
    brokers = sorted(md.brokers, key=lambda b: b.node_id)
    if args.format == "json":
        print_json({"cluster_id": md.cluster_id, "controller_id": md.controller_id,
                    "brokers": [{"id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack} for b in brokers]})
        return 0
    print(f"CLUSTER\n=======\n{md.cluster_id}\n")
    print("BROKERS\n=======")
    print_table([Column("ID", "id"), Column("HOST", "host"), Column("PORT", "port"), Column("RACK", "rack")],
                [[f"{b.node_id}*" if b.node_id == md.controller_id else b.node_id, b.host, b.port, b.rack or None]
                 for b in brokers])
    return 0


# kafka-configs' quota entity types -> the entity type on the wire
QUOTA_ENTITY_TYPES = {"users": ClientQuotaEntity.USER, "clients": ClientQuotaEntity.CLIENT_ID,
                      "ips": ClientQuotaEntity.IP}


def _quota_entity(args: argparse.Namespace) -> dict[str, str | None] | None:
    """The quota entity the arguments name ({entity type: name, None for the default}), or None
    when they name a topic or broker. A type given without a name stands for any name
    (describe only)."""
    out: dict[str, str | None] = {}
    if args.entity_type in QUOTA_ENTITY_TYPES:
        out[QUOTA_ENTITY_TYPES[args.entity_type]] = None if args.entity_default else (args.entity_name or "")
    for etype, name, default in ((ClientQuotaEntity.USER, args.user, args.user_defaults),
                                 (ClientQuotaEntity.CLIENT_ID, args.client, args.client_defaults),
                                 (ClientQuotaEntity.IP, args.ip, args.ip_defaults)):
        if name is not None or default:
            if etype in out:
                raise CliError(f"the {etype} entity is given twice", 2)
            out[etype] = None if default else name
    if not out:
        if args.entity_type is None:
            raise CliError("--entity-type is required (or --user, --client, --ip)", 2)
        return None
    if args.entity_type not in (None, *QUOTA_ENTITY_TYPES):
        raise CliError(f"--entity-type {args.entity_type} does not combine with quota entities", 2)
    return out


def _render_entity(entity: ClientQuotaEntity) -> str:
    return ",".join(f"{t}={'<default>' if n is None else n}" for t, n in entity.parts)


async def _quotas(admin: AsyncAdminClient, args: argparse.Namespace, wanted: dict[str, str | None]) -> int:
    if args.action == "alter":
        if "" in wanted.values():
            raise CliError("alter needs a name for each entity (--entity-name, or --entity-default)", 2)
        ops = []
        for k, v in parse_kv(args.set, "--set").items():
            try:
                ops.append(ClientQuotaAlterationOp(k, float(v)))
            except ValueError:
                raise CliError(f"--set {k}: '{v}' is not a number", 2) from None
        ops += [ClientQuotaAlterationOp(k, None) for k in args.delete or []]
        if not ops:
            raise CliError("alter needs --set KEY=VALUE or --delete KEY", 2)
        entity = ClientQuotaEntity(wanted)
        err = (await admin.alter_client_quotas([ClientQuotaAlteration(entity, ops)]))[entity]
        if err is not None:
            raise err
        print(f"Completed updating quotas for {_render_entity(entity)}.")
        return 0
    components = [ClientQuotaFilterComponent.of_entity_type(t) if n == "" else
                  ClientQuotaFilterComponent.of_default_entity(t) if n is None else
                  ClientQuotaFilterComponent.of_entity(t, n) for t, n in wanted.items()]
    found = await admin.describe_client_quotas(ClientQuotaFilter.contains_only(components))
    rows: list[list[object]] = []
    for entity in sorted(found, key=_render_entity):
        for k, v in sorted(found[entity].items()):
            rows.append([_render_entity(entity), k, v if args.format == "json" else
                         f"{v:g}" if v != int(v) else str(int(v))])
    print_table([Column("ENTITY", "entity"), Column("KEY", "key"), Column("VALUE", "value")], rows, args.format)
    return 0


# Config resources that describe without a name lists (ListConfigResources), as kafka-configs does.
_LISTED = {"groups": (RESOURCE_GROUP_CONFIG, "group"), "client-metrics": (RESOURCE_CLIENT_METRICS, "subscription")}


def _resource(args: argparse.Namespace) -> tuple[int, str]:
    if args.entity_default and (args.entity_type != "brokers" or args.entity_name):
        raise CliError("--entity-default goes with --entity-type brokers and no --entity-name", 2)
    if args.entity_type == "brokers":
        return ResourceType.BROKER, args.entity_name or ""
    if args.entity_type in _LISTED:
        if not args.entity_name and args.action == "alter":
            raise CliError(f"--entity-name is required to alter a {_LISTED[args.entity_type][1]}'s configs", 2)
        return _LISTED[args.entity_type][0], args.entity_name or ""
    if not args.entity_name:
        raise CliError("--entity-name is required for topics", 2)
    return ResourceType.TOPIC, args.entity_name


CONFIG_COLUMNS = [Column("KEY", "name"), Column("VALUE", "value"), Column("SOURCE", "source")]


def _config_rows(entries: list[dcr.DescribeConfigsResourceResult], describe_all: bool) -> list[list[str]]:
    rows = []
    for c in sorted(entries, key=lambda c: c.name):
        if not describe_all and c.config_source == ConfigSource.DEFAULT_CONFIG:
            continue
        value = "(sensitive)" if c.is_sensitive else ("" if c.value is None else c.value)
        source = ConfigSource(c.config_source).name if c.config_source in ConfigSource._value2member_map_ \
            else str(c.config_source)
        rows.append([c.name, value, source])
    return rows


async def _configs(admin: AsyncAdminClient, args: argparse.Namespace) -> int:
    quota_entity = _quota_entity(args)
    if quota_entity is not None:
        return await _quotas(admin, args, quota_entity)
    rtype, name = _resource(args)
    if rtype == ResourceType.BROKER and not name and not args.entity_default:
        md = await admin.describe_cluster()
        name = str(min(b.node_id for b in md.brokers))
    if args.action == "alter":
        # IncrementalAlterConfigs operations: 0 SET, 1 DELETE
        ops = [(k, 0, v) for k, v in parse_kv(args.set, "--set").items()]
        ops += [(k, 1, None) for k in args.delete or []]
        if not ops:
            raise CliError("alter needs --set KEY=VALUE or --delete KEY", 2)
        await admin.incremental_alter_configs(rtype, name, ops)
        what = "default broker" if args.entity_default else f"{args.entity_type[:-1]} {name}"
        print(f"Completed updating config for {what}.")
        return 0
    if args.entity_type in _LISTED and not name:
        # Every group (subscription) with configs of its own, as kafka-configs lists them.
        names = sorted(n for n, _ in await admin.list_config_resources([rtype]))
        owner = _LISTED[args.entity_type][1]
        rows = []
        for each in names:
            rows += [[each, *row] for row in _config_rows(await admin.describe_configs(rtype, each), args.all)]
        print_table([Column(owner.upper(), owner), *CONFIG_COLUMNS], rows, args.format)
        return 0
    entries = await admin.describe_configs(rtype, name)
    print_table(CONFIG_COLUMNS, _config_rows(entries, args.all), args.format)
    return 0


async def _offsets_get(admin: AsyncAdminClient, args: argparse.Namespace) -> int:
    known = await topic_partitions(admin, args.topic)
    tps = [TP(t, p) for t in args.topic for p in known[t]]
    start = await admin.list_offsets({tp: EARLIEST for tp in tps})
    end = await admin.list_offsets({tp: LATEST for tp in tps})
    rows = [[t, p, start[TP(t, p)][0], end[TP(t, p)][0]] for t, p in tps]
    print_table([Column("TOPIC", "topic"), Column("PARTITION", "partition"), Column("START-OFFSET", "start_offset"),
                 Column("END-OFFSET", "end_offset")], rows, args.format)
    return 0


async def _delete_records(admin: AsyncAdminClient, args: argparse.Namespace) -> int:
    known = await topic_partitions(admin, [args.topic])
    parts = args.partition if args.partition is not None else known[args.topic]
    for p in parts:
        if p not in known[args.topic]:
            raise CliError(f"{args.topic} has no partition {p}")
    lows = await admin.delete_records({TP(args.topic, p): args.offset for p in parts})
    rows = [[t, p, low] for (t, p), low in sorted(lows.items())]
    print_table([Column("TOPIC", "topic"), Column("PARTITION", "partition"),
                 Column("NEW-START-OFFSET", "new_start_offset")], rows)
    return 0


def _cluster_command(args: argparse.Namespace) -> int:
    if args.action == "info":
        return _run("cluster info", args, lambda admin: _cluster_info(admin, args))
    from rivulet.cli import local_cluster
    action = {"up": local_cluster.up, "status": local_cluster.status, "down": local_cluster.down}[args.action]
    return run_command(f"cluster {args.action}", args, lambda: action(args))


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    c = sub.add_parser("cluster", help="describe the cluster (info), or run a local one: a ZooKeeper server "
                                       "and N brokers on loopback ports (up, status, down)")
    c.add_argument("action", choices=["info", "up", "status", "down"],
                   help="info: the cluster's id, brokers and controller; up: start a local cluster; status: its "
                        "processes; down: stop it")
    add_connection_args(c)
    c.add_argument("--dir", default="rivulet-cluster", help="up/status/down: the local cluster's directory "
                   "(data, logs, and the processes it runs) (default: ./rivulet-cluster)")
    c.add_argument("--brokers", type=int, default=3, help="up: how many brokers (default 3)")
    c.add_argument("--port", type=int, default=9092, help="up: the first broker's port, the next ones follow "
                   "(default 9092; 0 picks free ports)")
    c.add_argument("--metrics-port", type=int, default=9404, help="up: the first broker's Prometheus metrics "
                   "port (metrics.listener), the next ones follow (default 9404; 0 picks free ports)")
    c.add_argument("--registry-port", type=int, default=None, help="up: the first broker's schema registry port "
                   "(schema.registry.listeners), the next ones follow (default 8081, or free ports when taken; 0 "
                   "picks free ports; -1 for none; none either without the registry extra)")
    c.add_argument("--zookeeper-port", type=int, default=2181, help="up: ZooKeeper's port (default 2181; 0 "
                   "picks a free one)")
    c.add_argument("--replication-factor", type=int, default=3, help="up: default.replication.factor of the "
                   "brokers (at most --brokers; default 3)")
    c.add_argument("--racks", type=int, default=0, help="up: spread the brokers over this many racks "
                   "(broker.rack), for rack-aware placement")
    c.add_argument("--log-level", default="info", metavar="[LOGGER=]LEVEL[,...]",
                   help="up: the brokers' log levels, as `rivulet broker --log-level` takes them (default info)")
    c.add_argument("--log-format", choices=LOG_FORMATS, default="text",
                   help="up: the brokers' log lines, text (default) or JSON, in their log files")
    c.add_argument("--timeout", type=float, default=60.0, help="up: wait this long for the brokers to register; "
                   "down: for each process to stop (seconds, default 60)")
    c.add_argument("--override", action="append", metavar="KEY=VALUE", help="up: a broker property for every "
                   "broker, as `rivulet broker --override` (repeatable), e.g. min.insync.replicas=2")
    c.add_argument("--purge", action="store_true", help="down: remove the cluster's directory too")
    add_format_arg(c)
    c.set_defaults(func=_cluster_command)

    g = sub.add_parser("configs", help="describe or alter broker, topic and group configs, client metrics "
                                       "subscriptions and client quotas (like kafka-configs)")
    g.add_argument("action", choices=["describe", "alter"], help="what to do")
    add_connection_args(g)
    g.add_argument("--entity-type", choices=["topics", "brokers", "groups", "client-metrics", *QUOTA_ENTITY_TYPES],
                   help="the kind of resource: a topic, a broker, a group, a client metrics subscription "
                   "(KIP-714), or a client quota entity")
    g.add_argument("--entity-name", help="the topic, the broker id (default: the first broker), the group, the "
                   "subscription, or the user, client id or IP (describe without one: every group, subscription, "
                   "or entity of that type)")
    g.add_argument("--entity-default", action="store_true",
                   help="brokers: the cluster-wide default every broker inherits, instead of one broker; "
                   "users, clients, ips: the default entity")
    for flag, what in (("user", "user principal"), ("client", "client id"), ("ip", "IP address")):
        g.add_argument(f"--{flag}", metavar="NAME", help=f"quotas of this {what} (user and client combine)")
        g.add_argument(f"--{flag}-defaults", action="store_true", help=f"quotas of the default {what}")
    g.add_argument("--all", action="store_true",
                   help="describe: include the values that are defaults (SOURCE DEFAULT_CONFIG)")
    g.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="alter: set a config or a quota such as producer_byte_rate=1048576 (repeatable)")
    g.add_argument("--delete", action="append", metavar="KEY", help="alter: remove an override (repeatable)")
    add_format_arg(g)
    g.set_defaults(func=lambda a: _run(f"configs {a.action}", a, lambda admin: _configs(admin, a)))

    o = sub.add_parser("offsets", help="show each partition's start and end offset")
    o.add_argument("action", choices=["get"], help="what to do")
    add_connection_args(o)
    o.add_argument("--topic", action="append", required=True, help="topic (repeatable)")
    add_format_arg(o)
    o.set_defaults(func=lambda a: _run("offsets get", a, lambda admin: _offsets_get(admin, a)))

    d = sub.add_parser("delete-records", help="delete a partition's records before an offset (like "
                                              "kafka-delete-records)")
    add_connection_args(d)
    d.add_argument("--topic", required=True, help="the topic")
    d.add_argument("--partition", type=int, action="append", help="partition (repeatable; default: all)")
    d.add_argument("--offset", type=int, default=-1,
                   help="delete everything before this offset (default -1: the high watermark, i.e. all)")
    d.set_defaults(func=lambda a: _run("delete-records", a, lambda admin: _delete_records(admin, a)))
