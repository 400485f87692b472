"""Zero-copy Fetch: a log's FileRegions hold exactly the bytes its ordinary reads return, and
the sender thread writes a response's parts in order over a real socket, waiting when the
reader is slow, stopping when cancelled, and closing every descriptor it was given."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import threading

import pytest
from test_storage import append, make_batch, records

from rivulet.common.file_region import FileRegion
from rivulet.protocol.records import iter_batches
from rivulet.server import file_sender
from rivulet.server.file_sender import FileSender, read_regions
from rivulet.storage import Log, LogConfig

pytestmark = pytest.mark.fast


def open_fds(under: str | os.PathLike) -> int:
    """This process's descriptors on files below ``under``: other threads of a test worker open
    and close descriptors of their own meanwhile, so a count of all of them can move."""
    prefix = os.path.join(os.path.abspath(under), "")
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(prefix):
                n += 1
        except OSError:  # closed meanwhile
            pass
    return n


@pytest.fixture
def log(tmp_path):
    lg = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=300_000, index_interval_bytes=4096))
    rnd = random.Random(7)
    for _ in range(300):  # batches of 1 to 60 records of 5 to 900 bytes: several segments
        n = rnd.randint(1, 60)
        append(lg, make_batch(records(n, rnd.randint(5, 900))))
    yield lg
    lg.close()


def as_bytes(data: bytes | memoryview | FileRegion) -> bytes:
    return data.read() if isinstance(data, FileRegion) else bytes(data)


def test_regions_hold_what_reads_return(log):
    rnd = random.Random(11)
    leo = log.log_end_offset
    regions = 0
    for _ in range(400):
        offset = rnd.randrange(0, leo)
        max_bytes = rnd.choice([0, 1, 100, 5_000, 70_000, 1 << 20, 10 << 20])
        max_offset = rnd.choice([None, leo, rnd.randrange(offset, leo + 1)])
        min_one = rnd.random() < 0.8
        plain = log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one)
        zero = log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one,
                        zero_copy_min=rnd.choice([1, 1000, 64 * 1024]))
        assert zero.fetch_offset_metadata == plain.fetch_offset_metadata
        if isinstance(zero.records, FileRegion):
            regions += 1
            region = zero.records
            expected = bytes(plain.records)
            batches = [h for _, h in iter_batches(expected)]
            assert region.next_offset == batches[-1].next_offset
            assert region.record_count == sum(h.records_count for h in batches)
        assert as_bytes(zero.records) == bytes(plain.records)
    assert regions > 100


def test_the_walk_over_large_batches_reads_headers_only(tmp_path, monkeypatch):
    # Batches of about 100 KiB, as the consume rows' (about 1 MB): the walk's first read is a
    # page, then only the headers; the regions are those of the plain read.
    from rivulet.storage import segment
    lg = Log(str(tmp_path / "t-0"), LogConfig())
    for _ in range(12):
        append(lg, make_batch(records(100, 1000)))
    lg.high_watermark = lg.log_end_offset
    sizes: list[int] = []
    real_pread = os.pread

    def pread(fd: int, n: int, pos: int) -> bytes:
        sizes.append(n)
        return real_pread(fd, n, pos)

    try:
        for offset in (0, 150, 800):
            plain = bytes(lg.read(offset, 350_000).records)
            monkeypatch.setattr(segment.os, "pread", pread)
            region = lg.read(offset, 350_000, zero_copy_min=1).records
            monkeypatch.setattr(segment.os, "pread", real_pread)
            assert isinstance(region, FileRegion)
            assert region.read() == plain
            assert len(plain) > 200_000  # whole batches: three of them
        assert sizes and max(sizes) <= segment._FIRST_HEADER_CHUNK
    finally:
        lg.close()


def test_a_region_outlives_its_segment(log):
    before = open_fds(log.dir)
    region = log.read(0, 1 << 20, zero_copy_min=1).records
    assert isinstance(region, FileRegion)
    expected = bytes(log.read(0, 1 << 20).records)
    log.high_watermark = log.log_end_offset
    log.delete_records_before(log.log_end_offset)  # every old segment goes
    log.close()
    assert region.read() == expected
    assert open_fds(log.dir) < before  # the region's descriptor and the log's are closed


def test_regions_borrow_their_segments_descriptor_and_keep_it_open_until_released(log):
    # At 10,000 partitions a descriptor per region would not fit: a region pins its segment.
    before = open_fds(log.dir)
    first = log.log_segments()[0]
    regions = [log.read(0, 1 << 20, zero_copy_min=1).records for _ in range(20)]
    assert all(isinstance(r, FileRegion) and r.fd == first.fd for r in regions)
    assert open_fds(log.dir) == before
    expected = regions[0].read()  # read, so released
    log.high_watermark = log.log_end_offset
    log.delete_records_before(log.log_end_offset)  # the first segment goes, pinned by 19 regions
    assert not first.closed
    assert regions[1].read() == expected
    del regions  # dropped unsent: released too
    assert first.closed
    assert open_fds(log.dir) < before


def test_a_truncated_region_is_refused(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 1000)
    region = FileRegion(os.open(path, os.O_RDONLY), 100, 800, 0, 0)
    os.truncate(path, 500)
    with pytest.raises(EOFError):
        read_regions([b"head", region])
    assert region.fd == -1


# -- the sender ---------------------------------------------------------------------------------


@pytest.fixture(params=["c", "python"])
def impl(request, monkeypatch):
    """Each sender test runs with the C accelerator's send_parts and with the Python reference."""
    if request.param == "c":
        if file_sender._c_send_parts is None:
            pytest.fail("the C accelerator rivulet.server._sendfile is not built")
        monkeypatch.delenv("RIVULET_PY_SENDFILE", raising=False)
    else:
        monkeypatch.setenv("RIVULET_PY_SENDFILE", "1")
    return request.param


def region_of(tmp_path, data: bytes, name: str = "seg") -> FileRegion:
    path = tmp_path / name
    path.write_bytes(b"-" * 10 + data + b"-" * 10)
    return FileRegion(os.open(path, os.O_RDONLY), 10, len(data), 0, 0)


def run_send(parts, reader_delay: float = 0.0, cancel_after: float | None = None,
             tls: file_sender.Encryptor | None = None) -> tuple[bytes, BaseException | None]:
    """Send ``parts`` over a socket pair with a reader on a thread; what arrived and the error."""
    a, b = socket.socketpair()
    a.setblocking(False)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # small: the sender must wait
    received = bytearray()

    def reader() -> None:
        import time
        time.sleep(reader_delay)
        while chunk := b.recv(65536):
            received.extend(chunk)
            if reader_delay:
                time.sleep(0.001)

    t = threading.Thread(target=reader)
    t.start()

    async def main() -> BaseException | None:
        sender = FileSender(max_senders=1)
        done: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        size = file_sender.regions_size(parts)
        send = sender.start(a.fileno(), parts, size, done.set_result, tls)
        assert send is not None
        assert sender.start(a.fileno(), [b"x"], 0, lambda e: None) is None  # the one sender is busy
        if cancel_after is not None:
            await asyncio.sleep(cancel_after)
            send.cancel()
        err = await done
        assert sender.active == 0
        # Only a whole send counts, with the size it was given, under its kind.
        counted = sender.region_bytes_sent if tls is None else sender.tls_region_bytes_sent
        assert counted == (size if err is None else 0)
        sender.close()
        return err

    err = asyncio.run(main())
    a.close()
    t.join(10)
    b.close()
    return bytes(received), err


def test_sender_writes_parts_in_order(tmp_path, impl):
    big = os.urandom(3 << 20)
    small = os.urandom(5000)
    r1, r2 = region_of(tmp_path, big, "a"), region_of(tmp_path, small, "b")
    before = open_fds(tmp_path)
    got, err = run_send([b"head", memoryview(bytearray(b"mid")), r1, b"between", r2, b"tail"], reader_delay=0.05)
    assert err is None
    assert got == b"head" + b"mid" + big + b"between" + small + b"tail"
    assert r1.fd == r2.fd == -1
    assert open_fds(tmp_path) == before - 2


def test_cancel_stops_a_blocked_send(tmp_path, impl):
    a, b = socket.socketpair()
    a.setblocking(False)
    region = region_of(tmp_path, os.urandom(8 << 20))

    async def main() -> BaseException | None:
        sender = FileSender()
        done: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        send = sender.start(a.fileno(), [b"head", region], region.size, done.set_result)
        await asyncio.sleep(0.3)  # nobody reads: the socket fills and the sender waits
        assert not done.done()
        send.cancel()
        return await done

    err = asyncio.run(main())
    assert isinstance(err, ConnectionAbortedError)
    assert region.fd == -1
    a.close()
    b.close()


def test_a_client_that_reads_nothing_is_given_up(tmp_path, impl):
    a, b = socket.socketpair()
    a.setblocking(False)
    region = region_of(tmp_path, os.urandom(8 << 20))

    async def main() -> BaseException | None:
        sender = FileSender(max_stall_ms=300)
        done: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        sender.start(a.fileno(), [b"head", region], region.size, done.set_result)
        return await done

    assert isinstance(asyncio.run(main()), TimeoutError)
    assert region.fd == -1
    a.close()
    b.close()


def test_a_peer_gone_fails_the_send(tmp_path, impl):
    a, b = socket.socketpair()
    a.setblocking(False)
    b.close()
    region = region_of(tmp_path, os.urandom(1 << 20))

    async def main() -> BaseException | None:
        sender = FileSender()
        done: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        sender.start(a.fileno(), [b"head", region], region.size, done.set_result)
        return await done

    err = asyncio.run(main())
    assert isinstance(err, OSError)
    assert region.fd == -1
    a.close()


def test_many_small_regions_arrive_in_order(tmp_path, impl):
    # A Fetch over many partitions: a region per partition, between the partitions' headers.
    chunks = [os.urandom(random.Random(i).randint(0, 20_000)) for i in range(120)]
    parts: list = [b"response-header"]
    for i, chunk in enumerate(chunks):
        parts += [f"partition-{i}".encode(), region_of(tmp_path, chunk, f"s{i}")]
    regions = [p for p in parts if isinstance(p, FileRegion)]
    got, err = run_send(parts, reader_delay=0.05)
    assert err is None
    assert got == b"response-header" + b"".join(f"partition-{i}".encode() + c for i, c in enumerate(chunks))
    assert all(r.fd == -1 for r in regions)


def test_a_region_truncated_while_sent_fails_the_send(tmp_path, impl):
    path = tmp_path / "f"
    path.write_bytes(os.urandom(2 << 20))
    region = FileRegion(os.open(path, os.O_RDONLY), 0, 2 << 20, 0, 0)
    os.truncate(path, 1 << 20)
    got, err = run_send([b"head", region])
    assert isinstance(err, EOFError)
    assert len(got) == 4 + (1 << 20)  # what the file still held went out before the failure
    assert region.fd == -1


class Framing:
    """Stands for a TLS connection's SSL object: each chunk comes out framed, so the chunking
    shows in what arrives, and the loop's queued bytes come out once the send ends."""

    def __init__(self) -> None:
        self.chunks: list[int] = []
        self.queued = [b"[queued]"]

    def encrypt(self, data: bytes | bytearray | memoryview) -> bytes:
        self.chunks.append(len(data))
        return b"<" + bytes(data) + b">"

    def end_send(self) -> bytes:
        return self.queued.pop() if self.queued else b""


def test_an_encrypted_send_goes_in_full_chunks_across_parts(tmp_path):
    chunk = file_sender.TLS_CHUNK
    pieces = [b"head", os.urandom(chunk - 10), b"x" * 30, os.urandom(2 * chunk + 7), b"", os.urandom(5), b"tail"]
    parts = [region_of(tmp_path, p, f"s{i}") if i % 2 else p for i, p in enumerate(pieces)]
    tls = Framing()
    got, err = run_send(parts, reader_delay=0.05, tls=tls)
    assert err is None
    whole = b"".join(pieces)
    assert tls.chunks == [chunk] * (len(whole) // chunk) + [len(whole) % chunk]
    assert got == b"".join(b"<" + whole[i:i + chunk] + b">" for i in range(0, len(whole), chunk)) + b"[queued]"
    assert all(p.fd == -1 for p in parts if isinstance(p, FileRegion))


def test_an_encrypted_send_of_a_truncated_region_fails(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(os.urandom(3 * file_sender.TLS_CHUNK))
    region = FileRegion(os.open(path, os.O_RDONLY), 0, 3 * file_sender.TLS_CHUNK, 0, 0)
    os.truncate(path, file_sender.TLS_CHUNK + 100)
    tls = Framing()
    got, err = run_send([b"head", region], tls=tls)
    assert isinstance(err, EOFError)
    assert tls.chunks == [file_sender.TLS_CHUNK]  # the full chunks read went out before the failure
    assert region.fd == -1


def test_a_slow_reader_that_keeps_reading_is_not_given_up(tmp_path, impl):
    """The stall limit counts time without progress, not the send's length: the C sender
    waits for the socket itself and reports where it got each _POLL_MS."""
    a, b = socket.socketpair()
    a.setblocking(False)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    data = os.urandom(1 << 20)
    region = region_of(tmp_path, data)
    received = bytearray()

    def reader() -> None:
        import time
        while chunk := b.recv(4096):
            received.extend(chunk)
            time.sleep(0.002)  # about 2 MB/s: the whole send lasts longer than the stall limit

    t = threading.Thread(target=reader)
    t.start()

    async def main() -> BaseException | None:
        sender = FileSender(max_stall_ms=100)
        done: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        sender.start(a.fileno(), [b"head", region], region.size, done.set_result)
        return await done

    err = asyncio.run(main())
    a.close()
    t.join(30)
    b.close()
    assert err is None
    assert bytes(received) == b"head" + data
