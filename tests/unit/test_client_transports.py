"""Both transports follow the client core's retry rules: scripted broker answers, no sockets."""

from __future__ import annotations

import asyncio
import threading

import pytest

from rivulet.client import blocking, core
from rivulet.client.client import KafkaClient
from rivulet.client.config import resolve
from rivulet.protocol.errors import ErrorCode, ApiError
from rivulet.protocol.messages import (
    find_coordinator_response as fcr,
    list_offsets_response as lor,
    metadata_response as mr,
    offset_commit_response as ocr,
    offset_fetch_response as ofr,
)

pytestmark = pytest.mark.fast

NO_JITTER = core.Backoff(100, 1000, jitter=0)


def found(node: int = 1) -> fcr.FindCoordinatorResponse:
    return fcr.FindCoordinatorResponse(coordinators=[fcr.Coordinator(key="g", node_id=node, host="h", port=node)])


def not_found(code: int) -> fcr.FindCoordinatorResponse:
    return fcr.FindCoordinatorResponse(coordinators=[fcr.Coordinator(key="g", node_id=-1, error_code=code)])


def metadata(leader: int) -> mr.MetadataResponse:
    return mr.MetadataResponse(
        brokers=[mr.MetadataResponseBroker(node_id=n, host="h", port=n) for n in (1, 2)],
        topics=[mr.MetadataResponseTopic(name="t", partitions=[
            mr.MetadataResponsePartition(partition_index=0, leader_id=leader)])])


def list_offsets(code: int = 0, offset: int = -1) -> lor.ListOffsetsResponse:
    return lor.ListOffsetsResponse(topics=[lor.ListOffsetsTopicResponse(name="t", partitions=[
        lor.ListOffsetsPartitionResponse(partition_index=0, error_code=code, offset=offset)])])


def commit_answer(code: int) -> ocr.OffsetCommitResponse:
    return ocr.OffsetCommitResponse(topics=[ocr.OffsetCommitResponseTopic(name="t", partitions=[
        ocr.OffsetCommitResponsePartition(partition_index=0, error_code=code)])])


class Script:
    """Answers by request type, in order; records which node each request went to."""

    def __init__(self, answers: dict[str, list]) -> None:
        self.answers = {k: list(v) for k, v in answers.items()}
        self.sent: list[tuple[str, int]] = []

    def answer(self, node: int, req: object) -> object:
        name = type(req).__name__
        self.sent.append((name, node))
        a = self.answers[name].pop(0)
        if isinstance(a, BaseException):
            raise a
        return a

    def nodes(self, name: str) -> list[int]:
        """The brokers each ``name`` request went to, in order."""
        return [node for sent, node in self.sent if sent == name]


class FakeConn:
    def __init__(self, script: Script, node: int) -> None:
        self.script, self.node, self.busy = script, node, False

    def request(self, req: object) -> object:
        return self.script.answer(self.node, req)

    def close(self) -> None:
        pass


@pytest.fixture
def sleeps(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(blocking.time, "sleep", slept.append)
    return slept


def blocking_client(script: Script) -> blocking.BlockingClient:
    c = blocking.BlockingClient("b:9092", backoff=NO_JITTER)
    c.any_conn = lambda: FakeConn(script, -1)  # type: ignore[method-assign]
    c.conn = lambda node: FakeConn(script, node)  # type: ignore[method-assign]
    return c


# ---------------------------------------------------------------- blocking


def test_blocking_coordinator_waits_out_loading_with_backoff(sleeps):
    s = Script({"FindCoordinatorRequest": [not_found(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
                                           not_found(ErrorCode.COORDINATOR_NOT_AVAILABLE), found(2)]})
    assert blocking_client(s).coordinator("g") == 2
    assert sleeps == [0.1, 0.2]


def test_blocking_coordinator_gives_up_on_a_fatal_error(sleeps):
    s = Script({"FindCoordinatorRequest": [not_found(ErrorCode.GROUP_AUTHORIZATION_FAILED)]})
    with pytest.raises(ApiError) as e:
        blocking_client(s).coordinator("g")
    assert e.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED and sleeps == []


def test_blocking_commit_finds_a_moved_coordinator_again(sleeps):
    s = Script({"FindCoordinatorRequest": [found(1), found(2)],
                "OffsetCommitRequest": [commit_answer(ErrorCode.NOT_COORDINATOR), commit_answer(0)]})
    blocking_client(s).commit_offsets("g", {("t", 0): 5})
    assert s.nodes("OffsetCommitRequest") == [1, 2]


def test_blocking_commit_raises_a_partition_error(sleeps):
    s = Script({"FindCoordinatorRequest": [found(1)],
                "OffsetCommitRequest": [commit_answer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]})
    with pytest.raises(ApiError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        blocking_client(s).commit_offsets("g", {("t", 0): 5})
    assert sleeps == []


def test_blocking_committed_retries_unstable_offsets(sleeps):
    unstable = ofr.OffsetFetchResponse(topics=[ofr.OffsetFetchResponseTopic(name="t", partitions=[
        ofr.OffsetFetchResponsePartition(partition_index=0, error_code=ErrorCode.UNSTABLE_OFFSET_COMMIT)])])
    stable = ofr.OffsetFetchResponse(topics=[ofr.OffsetFetchResponseTopic(name="t", partitions=[
        ofr.OffsetFetchResponsePartition(partition_index=0, committed_offset=8, metadata="m")])])
    s = Script({"FindCoordinatorRequest": [found(1), found(1)], "OffsetFetchRequest": [unstable, stable]})
    assert blocking_client(s).committed("g", None) == {("t", 0): core.OffsetAndMetadata(8, "m")}
    assert sleeps == [0.1]


def test_blocking_list_offsets_follows_a_moved_leader(sleeps):
    s = Script({"MetadataRequest": [metadata(1), metadata(2)],
                "ListOffsetsRequest": [list_offsets(ErrorCode.NOT_LEADER_OR_FOLLOWER), list_offsets(0, 42)]})
    assert blocking_client(s).list_offsets({("t", 0): core.LATEST}) == {("t", 0): 42}
    assert s.nodes("ListOffsetsRequest") == [1, 2]


def test_blocking_list_offsets_raises_what_cannot_be_retried(sleeps):
    s = Script({"MetadataRequest": [metadata(1)],
                "ListOffsetsRequest": [list_offsets(ErrorCode.OFFSET_OUT_OF_RANGE)]})
    with pytest.raises(ApiError) as e:
        blocking_client(s).list_offsets({("t", 0): 5})
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


# ---------------------------------------------------------------- asyncio


def async_client(script: Script) -> KafkaClient:
    c = KafkaClient(resolve({"bootstrap.servers": "b:9092"}, "admin"))
    c.backoff = NO_JITTER

    async def send_any(req, **kw):
        return script.answer(-1, req)

    async def send(node, req, **kw):
        return script.answer(node, req)
    c.send_any = send_any  # type: ignore[method-assign]
    c.send = send  # type: ignore[method-assign]
    return c


def test_async_coordinator_and_retry_by_the_core_rules(monkeypatch):
    slept: list[float] = []
    me, real_sleep = threading.get_ident(), asyncio.sleep

    async def fake_sleep(d: float) -> None:
        if threading.get_ident() != me:  # a client thread another test left running sleeps as usual
            return await real_sleep(d)
        slept.append(d)
    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    s = Script({"FindCoordinatorRequest": [not_found(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), found(1), found(2)],
                "OffsetCommitRequest": [commit_answer(ErrorCode.NOT_COORDINATOR), commit_answer(0)]})
    c = async_client(s)

    async def run():
        req = core.offset_commit_request("g", {("t", 0): core.OffsetAndMetadata(1)})
        return await c.send_to_coordinator("g", core.GROUP, req, lambda r: core.read_offset_commit(r).first_error())
    resp = asyncio.run(run())
    assert core.read_offset_commit(resp).first_error() == 0
    assert c.cluster.brokers[2] == ("h", 2)
    assert slept == [0.1, 0.1]  # a fresh count for each lookup, then the moved coordinator's retry


def test_async_send_to_coordinator_returns_errors_it_does_not_retry(monkeypatch):
    s = Script({"FindCoordinatorRequest": [found(1)],
                "OffsetCommitRequest": [commit_answer(ErrorCode.ILLEGAL_GENERATION)]})
    c = async_client(s)

    async def run():
        req = core.offset_commit_request("g", {("t", 0): core.OffsetAndMetadata(1)})
        return await c.send_to_coordinator("g", core.GROUP, req, lambda r: core.read_offset_commit(r).first_error())
    resp = asyncio.run(run())
    assert core.read_offset_commit(resp).errors == {("t", 0): ErrorCode.ILLEGAL_GENERATION}


def test_blocking_frames_read_into_a_reused_buffer_that_grows_when_needed():
    import socket
    a, b = socket.socketpair()
    conn = blocking.BlockingConnection.__new__(blocking.BlockingConnection)
    conn.host, conn.port, conn.sock, conn._frame = "b", 9092, a, None
    try:
        b.sendall(b"x" * 1000 + b"y" * 500 + b"z" * 5000)
        first = conn._read_reusing(1000)
        assert bytes(first) == b"x" * 1000
        buf = conn._frame
        second = conn._read_reusing(500)
        assert bytes(second) == b"y" * 500 and conn._frame is buf  # the same memory, overwritten
        assert bytes(first[:500]) == b"y" * 500
        third = conn._read_reusing(5000)
        assert bytes(third) == b"z" * 5000 and conn._frame is not buf
        assert bytes(conn._read(0)) == b""
    finally:
        a.close()
        b.close()
