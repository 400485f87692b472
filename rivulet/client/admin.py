"""An asyncio admin client: topics, partitions and configs, on Rivulet's own codec."""

from __future__ import annotations

from typing import Any

from rivulet.client.connection import BrokerConnection
from rivulet.protocol.errors import ErrorCode, KafkaError
from rivulet.protocol.messages import (
    create_partitions_request as cpq,
    create_topics_request as ctq,
    delete_topics_request as dtq,
    describe_configs_request as dcq,
    incremental_alter_configs_request as iacq,
    metadata_request as mq,
)

RESOURCE_TOPIC = 2


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    out = []
    for item in servers.split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        host, _, port = item.rpartition(":")
        out.append((host.strip("[]") or "localhost", int(port)))
    if not out:
        raise ValueError("bootstrap.servers is empty")
    return out


def check(code: int, message: str | None = None) -> None:
    if code:
        raise KafkaError(ErrorCode(code), message)


class AsyncAdminClient:
    def __init__(self, bootstrap_servers: str, client_id: str = "rivulet-admin", request_timeout_ms: int = 30000):
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.conn: BrokerConnection | None = None

    async def _connection(self) -> BrokerConnection:
        if self.conn is None or self.conn.closed:
            last: Exception | None = None
            for host, port in self.bootstrap:
                try:
                    self.conn = await BrokerConnection(host, port, self.client_id, self.request_timeout_ms).connect()
                    break
                except OSError as e:
                    last = e
            else:
                raise ConnectionError(f"cannot reach any bootstrap server: {last}")
        return self.conn

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()

    async def metadata(self, topics: list[str] | None = None, allow_auto_create: bool = False) -> Any:
        c = await self._connection()
        req = mq.MetadataRequest(
            topics=None if topics is None else [mq.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=allow_auto_create)
        return await c.send(req)

    async def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                           configs: dict[str, str] | None = None, validate_only: bool = False) -> Any:
        c = await self._connection()
        req = ctq.CreateTopicsRequest(
            topics=[ctq.CreatableTopic(name=name, num_partitions=partitions, replication_factor=replication_factor,
                                       assignments=[], configs=[ctq.CreatableTopicConfig(name=k, value=v)
                                                               for k, v in (configs or {}).items()])],
            timeout_ms=self.request_timeout_ms, validate_only=validate_only)
        resp = await c.send(req)
        r = resp.topics[0]
        check(r.error_code, r.error_message)
        return r

    async def delete_topic(self, name: str) -> None:
        c = await self._connection()
        resp = await c.send(dtq.DeleteTopicsRequest(topic_names=[name], topics=[dtq.DeleteTopicState(name=name)],
                                                    timeout_ms=self.request_timeout_ms))
        r = resp.responses[0]
        check(r.error_code, r.error_message)

    async def create_partitions(self, name: str, count: int) -> None:
        c = await self._connection()
        resp = await c.send(cpq.CreatePartitionsRequest(
            topics=[cpq.CreatePartitionsTopic(name=name, count=count, assignments=None)],
            timeout_ms=self.request_timeout_ms, validate_only=False))
        r = resp.results[0]
        check(r.error_code, r.error_message)

    async def describe_topic_configs(self, name: str) -> list[Any]:
        c = await self._connection()
        resp = await c.send(dcq.DescribeConfigsRequest(
            resources=[dcq.DescribeConfigsResource(resource_type=RESOURCE_TOPIC, resource_name=name,
                                                   configuration_keys=None)],
            include_synonyms=False, include_documentation=False))
        r = resp.results[0]
        check(r.error_code, r.error_message)
        return r.configs

    async def alter_topic_configs(self, name: str, set_: dict[str, str], delete: list[str] | None = None) -> None:
        c = await self._connection()
        ops = [iacq.AlterableConfig(name=k, config_operation=0, value=v) for k, v in set_.items()]
        ops += [iacq.AlterableConfig(name=k, config_operation=1, value=None) for k in delete or []]
        resp = await c.send(iacq.IncrementalAlterConfigsRequest(
            resources=[iacq.AlterConfigsResource(resource_type=RESOURCE_TOPIC, resource_name=name, configs=ops)],
            validate_only=False))
        r = resp.responses[0]
        check(r.error_code, r.error_message)
