"""`rivulet topics create|list|describe|delete|alter`."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from contextlib import contextmanager
from typing import Any, Iterator

from rivulet.cli.common import CliError, add_connection_args, client_config, parse_kv, run_command
from rivulet.cli.output import add_format_arg, print_json
from rivulet.client.admin.client import AsyncAdminClient
from rivulet.common.types import TopicPartition as TP
from rivulet.iceberg.catalog import CatalogSettings
from rivulet.protocol.errors import ApiError, ErrorCode


async def _run(args: argparse.Namespace) -> int:
    admin = AsyncAdminClient(client_config(args, **{"client.id": "rivulet-topics"}))
    try:
        if args.action == "create":
            r = await admin.create_topic(args.topic, args.partitions, args.replication_factor,
                                         parse_kv(args.config, "--config"))
            print(f"Created topic {args.topic} ({r.num_partitions} partitions, id {r.topic_id}).")
        elif args.action == "list":
            md = await admin.metadata(None)
            names = [t.name for t in sorted(md.topics, key=lambda t: t.name)
                     if not (args.exclude_internal and t.is_internal)]
            if args.format == "json":
                print_json(names)
            else:
                for name in names:
                    print(name)
        elif args.action == "describe":
            md = await admin.metadata([args.topic] if args.topic else None)
            missing = [t for t in md.topics if t.error_code]
            if args.topic and missing:
                # Kafka's tool: describing a topic that is not there is an error, not an empty answer.
                raise CliError(f"Topic '{args.topic}' does not exist as expected")
            described = []
            for t in sorted(md.topics, key=lambda t: t.name):
                if t.error_code:
                    if args.format == "json":
                        described.append({"name": t.name, "error": ApiError(t.error_code).code.name})
                    else:
                        print(f"Topic: {t.name}\tError: {ApiError(t.error_code)}")
                    continue
                cfgs = await admin.describe_topic_configs(t.name)
                partitions = sorted(t.partitions, key=lambda p: p.partition_index)
                mode = next((c.value for c in cfgs if c.name == "iceberg.mode"), "none")
                iceberg = None if mode in (None, "none") else await _iceberg_status(admin, t.name, partitions)
                if args.format == "json":
                    described.append({
                        "name": t.name, "topic_id": str(t.topic_id), "partition_count": len(partitions),
                        "replication_factor": len(partitions[0].replica_nodes) if partitions else 0,
                        "configs": {c.name: c.value for c in cfgs if c.config_source == 1},
                        "partitions": [{"partition": p.partition_index, "leader": p.leader_id,
                                        "replicas": list(p.replica_nodes), "isr": list(p.isr_nodes)}
                                       for p in partitions]})
                    if iceberg is not None:
                        described[-1]["iceberg"] = iceberg
                    continue
                overrides = ",".join(f"{c.name}={c.value}" for c in cfgs if c.config_source == 1)
                print(f"Topic: {t.name}\tTopicId: {t.topic_id}\tPartitionCount: {len(t.partitions)}\t"
                      f"ReplicationFactor: {len(t.partitions[0].replica_nodes) if t.partitions else 0}\t"
                      f"Configs: {overrides}")
                if iceberg is not None:
                    lags = ",".join(f"{p}:{n}" for p, n in iceberg["lag"].items()) if iceberg["lag"] else "-"
                    print(f"\tIcebergTable: {iceberg['table']}\tSnapshot: {iceberg['snapshot_id']}\tLag: {lags}"
                          + (f"\tError: {iceberg['error']}" if iceberg.get("error") else ""))
                for p in partitions:
                    print(f"\tTopic: {t.name}\tPartition: {p.partition_index}\tLeader: {p.leader_id}\t"
                          f"Replicas: {','.join(map(str, p.replica_nodes))}\tIsr: {','.join(map(str, p.isr_nodes))}")
            if args.format == "json":
                print_json(described)
        elif args.action == "delete":
            with _names_missing_topic(args.topic):
                await admin.delete_topic(args.topic)
            print(f"Deleted topic {args.topic}.")
        elif args.action == "alter":
            with _names_missing_topic(args.topic):
                if args.partitions > 0:
                    await admin.create_partitions(args.topic, args.partitions)
                    print(f"Topic {args.topic} now has {args.partitions} partitions.")
                if args.config or args.delete_config:
                    await admin.alter_topic_configs(args.topic, parse_kv(args.config, "--config"),
                                                    args.delete_config)
                    print(f"Updated configs of {args.topic}.")
        return 0
    finally:
        await admin.close()


async def _iceberg_status(admin: AsyncAdminClient, topic: str, partitions: list[Any]) -> dict[str, Any]:
    """A topic's table as its catalog records it: name, current snapshot, and per partition the
    records committed to the log (up to the last stable offset) and not yet to the table. The
    catalog is the one the first partition's leader is configured with, read from here."""
    node = next((p.leader_id for p in partitions if p.leader_id >= 0), -1)
    out: dict[str, Any] = {"table": f"rivulet.{topic}", "snapshot_id": None, "lag": {}}
    if node < 0:
        return {**out, "error": "no partition has a leader"}
    broker = {c.name: c.value for c in await admin.describe_configs(
        4, str(node), ["iceberg.catalog.type", "iceberg.catalog.uri", "iceberg.catalog.warehouse", "log.dirs",
                       "log.dir"])}
    dirs = broker.get("log.dirs") or broker.get("log.dir") or ""
    # A REST catalog's credential and token are passwords, which DescribeConfigs never shows:
    # one that needs them cannot be read from here (the error says so).
    try:
        settings = CatalogSettings.resolve(broker.get("iceberg.catalog.uri") or "",
                                           broker.get("iceberg.catalog.warehouse") or "", dirs.split(",")[0],
                                           broker.get("iceberg.catalog.type") or "")
        state = await asyncio.get_running_loop().run_in_executor(None, _read_table, settings, topic)
    except Exception as e:  # the extra missing, a catalog this machine cannot reach
        return {**out, "error": f"{type(e).__name__}: {e}"}
    if state is None:
        return {**out, "error": "no table yet"}
    ends = await admin.list_offsets({TP(topic, p.partition_index): -1 for p in partitions}, isolation_level=1)
    out["snapshot_id"] = state.snapshot_id
    out["lag"] = {tp.partition: max(0, end - state.next_offsets.get(tp.partition, 0))
                  for tp, (end, _) in sorted(ends.items(), key=lambda kv: kv[0].partition)}
    return out


def _read_table(settings: CatalogSettings, topic: str) -> Any:
    from rivulet.iceberg.catalog import open_catalog
    from rivulet.iceberg.table import read_state

    if settings.uri.startswith("sqlite:///") and not os.path.exists(settings.uri[len("sqlite:///"):]):
        return None  # no table made yet, and describing makes no catalog
    return read_state(open_catalog(settings), topic)


@contextmanager
def _names_missing_topic(topic: str) -> Iterator[None]:
    """The broker's UNKNOWN_TOPIC_OR_PARTITION as Kafka's tool words it, naming the topic."""
    try:
        yield
    except ApiError as e:
        if e.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise
        raise CliError(f"Topic '{topic}' does not exist as expected") from None


def topics_main(args: argparse.Namespace) -> int:
    if args.action in ("create", "delete", "alter") and not args.topic:
        print(f"rivulet topics {args.action}: --topic is required", file=sys.stderr)
        return 2
    return run_command(f"topics {args.action}", args, lambda: asyncio.run(_run(args)))


def add_parser(sub: Any) -> None:
    t = sub.add_parser("topics", help="create, list, describe, delete and alter topics")
    t.add_argument("action", choices=["create", "list", "describe", "delete", "alter"], help="what to do")
    add_connection_args(t)
    t.add_argument("--topic", help="the topic (describe: all topics when omitted)")
    t.add_argument("--partitions", type=int, default=-1,
                   help="create: partition count (default: the broker's num.partitions); alter: the new count")
    t.add_argument("--replication-factor", type=int, default=-1,
                   help="create: replicas per partition (default: the broker's default.replication.factor)")
    t.add_argument("--config", action="append", metavar="KEY=VALUE",
                   help="create, alter: set a topic config (repeatable)")
    t.add_argument("--delete-config", action="append", metavar="KEY",
                   help="alter: remove a topic config override (repeatable)")
    t.add_argument("--exclude-internal", action="store_true", help="list: leave out internal topics")
    add_format_arg(t)
    t.set_defaults(func=topics_main)
