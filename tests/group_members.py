"""Members of modern groups (share, streams) driven by raw heartbeats through Rivulet's own
connection, for the integration tests that check the coordinator's answers field by field."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Sequence

from rivulet.client import core
from rivulet.client.connection import BrokerConnection
from rivulet.protocol.messages import describe_groups_request as dgq, incremental_alter_configs_request as iacq


async def set_group_configs(conn: BrokerConnection, group: str, configs: dict[str, str]) -> None:
    """Set ``configs`` on the GROUP config resource ``group`` (IncrementalAlterConfigs SET)."""
    r = await conn.send(iacq.IncrementalAlterConfigsRequest(resources=[iacq.AlterConfigsResource(
        resource_type=32, resource_name=group, configs=[iacq.AlterableConfig(
            name=k, config_operation=0, value=v) for k, v in configs.items()])], validate_only=False))
    assert r.responses[0].error_code == 0, r.responses[0]


async def until(check: Callable[[], Awaitable[Any]], what: str, timeout: float = 60.0) -> Any:
    """Poll ``check`` (a coroutine function) until it returns a true value, and return it."""
    deadline = time.monotonic() + timeout
    while True:
        got = await check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


async def find_coordinator(conn: BrokerConnection, key: str, key_type: int = core.GROUP,
                           timeout: float = 60.0) -> None:
    """Look the group's (or transactional id's) coordinator up first, as a client does (on a new
    broker that has __consumer_offsets or __transaction_state made, as Kafka 4.3.1's does); for
    a group, wait until its partition is loaded."""
    async def found() -> bool:
        return core.read_find_coordinator(await conn.send(core.find_coordinator_request(key, key_type)))[0] == 0

    async def loaded() -> bool:
        return (await conn.send(dgq.DescribeGroupsRequest(groups=[key]))).groups[0].error_code == 0
    await until(found, f"the coordinator of {key}", timeout)
    if key_type == core.GROUP:
        await until(loaded, f"the coordinator of {key} loaded", timeout)


class RawMember:
    """A member that sends its epoch in each heartbeat, takes the one answered, and keeps what it
    was last given (an answer without an assignment leaves that unchanged). A kind of group
    says what its request is (``request``) and what an answer gives the member (``took``)."""

    def __init__(self, conn: BrokerConnection, member_id: str) -> None:
        self.conn, self.member_id, self.epoch = conn, member_id, 0

    def request(self) -> Any:
        raise NotImplementedError

    def took(self, response: Any) -> None:
        raise NotImplementedError

    async def beat(self) -> Any:
        r = await self.conn.send(self.request())
        assert r.error_code == 0, (r.error_code, r.error_message)
        self.epoch = r.member_epoch
        self.took(r)
        return r


async def while_beating(members: Sequence[RawMember], call: Callable[[], Any]) -> Any:
    """Run the blocking ``call`` (a tool, say) in a thread while the members keep heartbeating,
    so that their sessions outlive it however long it takes; its result."""
    done = asyncio.Event()

    async def keep_alive() -> None:
        while not done.is_set():
            for m in members:
                await m.beat()
            try:
                await asyncio.wait_for(done.wait(), 0.3)
            except asyncio.TimeoutError:
                pass
    beating = asyncio.ensure_future(keep_alive())
    try:
        return await asyncio.to_thread(call)
    finally:
        done.set()
        await beating


async def beat_until(members: Sequence[RawMember], done: Callable[[], bool], what: str,
                     timeout: float = 60.0) -> None:
    """Every member heartbeats, again and again, until ``done()`` holds."""
    async def step() -> bool:
        for m in members:
            await m.beat()
        return done()
    await until(step, what, timeout)
