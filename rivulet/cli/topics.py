"""`rivulet topics create|list|describe|delete|alter`."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from rivulet.cli.common import CliError, add_connection_args, client_config, parse_kv, run_command
from rivulet.cli.output import add_format_arg, print_json
from rivulet.client.config import ClientConf
from rivulet.client.admin.client import AsyncAdminClient
from rivulet.client.consumer.consumer import AIOConsumer
from rivulet.client.types import TopicPartition
from rivulet.common.time import now_ms
from rivulet.common.types import TopicPartition as TP
from rivulet.iceberg.catalog import CatalogSettings
from rivulet.iceberg.offsets import TableState
from rivulet.protocol.errors import ApiError, ErrorCode


async def _run(args: argparse.Namespace) -> int:
    conf = client_config(args, **{"client.id": "rivulet-topics"})
    admin = AsyncAdminClient(conf)
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
                iceberg = None if mode in (None, "none") else await table_status(
                    admin, conf, t.name, {p.partition_index: p.leader_id for p in partitions})
                if args.format == "json":
                    described.append({
                        "name": t.name, "topic_id": str(t.topic_id), "partition_count": len(partitions),
                        "replication_factor": len(partitions[0].replica_nodes) if partitions else 0,
                        "configs": {c.name: c.value for c in cfgs if c.config_source == 1},
                        "partitions": [{"partition": p.partition_index, "leader": p.leader_id,
                                        "replicas": list(p.replica_nodes), "isr": list(p.isr_nodes)}
                                       for p in partitions]})
                    if iceberg is not None:
                        described[-1]["iceberg"] = iceberg.to_json()
                    continue
                overrides = ",".join(f"{c.name}={c.value}" for c in cfgs if c.config_source == 1)
                print(f"Topic: {t.name}\tTopicId: {t.topic_id}\tPartitionCount: {len(t.partitions)}\t"
                      f"ReplicationFactor: {len(t.partitions[0].replica_nodes) if t.partitions else 0}\t"
                      f"Configs: {overrides}")
                if iceberg is not None:
                    print(_table_line(iceberg))
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


@dataclass(frozen=True)
class TablePartition:
    """One partition as the topic's table stands: the next offset its snapshot summary records,
    the records committed to the log (up to the last stable offset) and not yet to the table,
    and the age of the oldest of those by its timestamp (0: none behind; None: not read)."""

    partition: int
    next_offset: int
    lag: int
    lag_ms: int | None


@dataclass
class TableStatus:
    """A topic's Iceberg table for ``rivulet topics describe`` and the console."""

    table: str
    snapshot_id: int | None = None
    partitions: list[TablePartition] = field(default_factory=list)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"table": self.table, "snapshot_id": self.snapshot_id,
                               "lag": {p.partition: p.lag for p in self.partitions}}
        if self.partitions:
            out["lag_ms"] = {p.partition: p.lag_ms for p in self.partitions}
            out["next_offsets"] = {p.partition: p.next_offset for p in self.partitions}
        if self.error:
            out["error"] = self.error
        return out


async def table_status(admin: AsyncAdminClient, conf: ClientConf, topic: str, partitions: dict[int, int]
                       ) -> TableStatus:
    """A topic's table as its catalog records it (``partitions``: partition -> leader): name,
    current snapshot, and per partition the table's next offset and lag in records and time.
    The catalog is the one the first partition's leader is configured with, read from here;
    the lag's time from the first committed record not in the table, read with ``conf``."""
    out = TableStatus(f"rivulet.{topic}")
    node = next((leader for _, leader in sorted(partitions.items()) if leader >= 0), -1)
    if node < 0:
        out.error = "no partition has a leader"
        return out
    try:
        broker = {c.name: c.value for c in await admin.describe_configs(
            4, str(node), ["iceberg.catalog.type", "iceberg.catalog.uri", "iceberg.catalog.warehouse", "log.dirs",
                           "log.dir"])}
    except ApiError as e:  # not allowed to read the broker's configs, say: the rest of the page stands
        out.error = f"the catalog's settings: {e}"
        return out
    dirs = broker.get("log.dirs") or broker.get("log.dir") or ""
    # A REST catalog's credential and token are passwords, which DescribeConfigs never shows:
    # one that needs them cannot be read from here (the error says so).
    try:
        settings = CatalogSettings.resolve(broker.get("iceberg.catalog.uri") or "",
                                           broker.get("iceberg.catalog.warehouse") or "", dirs.split(",")[0],
                                           broker.get("iceberg.catalog.type") or "")
        state = await asyncio.get_running_loop().run_in_executor(None, _read_table, settings, topic)
    except Exception as e:  # the extra missing, a catalog this machine cannot reach
        out.error = f"{type(e).__name__}: {e}"
        return out
    if state is None:
        out.error = "no table yet"
        return out
    ends = await admin.list_offsets({TP(topic, p): -1 for p in partitions}, isolation_level=1)
    nexts = {tp.partition: state.next_offsets.get(tp.partition, 0) for tp in ends}
    behind = {p: nexts[p] for p in nexts if ends[TP(topic, p)][0] > nexts[p]}
    oldest = await _first_timestamps(conf, topic, behind) if behind else {}
    now = now_ms()
    out.snapshot_id = state.snapshot_id
    out.partitions = [TablePartition(p, nexts[p], max(0, ends[TP(topic, p)][0] - nexts[p]),
                                     0 if p not in behind else
                                     None if p not in oldest else max(0, now - oldest[p]))
                      for p in sorted(nexts)]
    return out


async def _first_timestamps(conf: ClientConf, topic: str, offsets: dict[int, int],
                            timeout_s: float = 2.0) -> dict[int, int]:
    """Partition -> the timestamp of its first committed record at or after the offset given
    (those that answer within ``timeout_s``: records all aborted, say, give none)."""
    # From the log start where retention passed the table's offset (those records never reach it).
    consumer = AIOConsumer({**conf, "group.id": "rivulet-table-status", "enable.auto.commit": False,
                            "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    found: dict[int, int] = {}
    try:
        consumer.assign([TopicPartition(topic, p, offset) for p, offset in offsets.items()])
        deadline = time.monotonic() + timeout_s
        while len(found) < len(offsets) and time.monotonic() < deadline:
            for m in await consumer.consume(len(offsets), max(0.0, deadline - time.monotonic())):
                if m.error() is None and m.partition() not in found:
                    found[m.partition()] = m.timestamp()[1]
                    consumer.pause([TopicPartition(topic, m.partition())])
    finally:
        await consumer.close()
    return found


def _read_table(settings: CatalogSettings, topic: str) -> TableState | None:
    from rivulet.iceberg.catalog import open_catalog
    from rivulet.iceberg.table import read_state

    if settings.uri.startswith("sqlite:///") and not os.path.exists(settings.uri[len("sqlite:///"):]):
        return None  # no table made yet, and describing makes no catalog
    return read_state(open_catalog(settings), topic)


def _table_line(t: TableStatus) -> str:
    """``describe``'s line for the table: per partition ``partition:value``, ``-`` for none."""
    def each(value: Callable[[TablePartition], object]) -> str:
        return ",".join(f"{p.partition}:{'-' if value(p) is None else value(p)}" for p in t.partitions) or "-"
    return (f"\tIcebergTable: {t.table}\tSnapshot: {t.snapshot_id}\tLag: {each(lambda p: p.lag)}"
            f"\tLagMs: {each(lambda p: p.lag_ms)}\tNextOffsets: {each(lambda p: p.next_offset)}"
            + (f"\tError: {t.error}" if t.error else ""))


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


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
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
