"""``SharePartition``: one share group's view of one partition, on the partition leader (KIP-932).

The in-flight window runs from the share-partition start offset (SPSO) to the end offset
(SPEO, kept here exclusive: the first offset never acquired yet). Every offset in it has a
state, Available, Acquired (by one member, under an acquisition lock), Acknowledged or
Archived, and a delivery count. As Kafka's InFlightBatch, the window is a sorted run of
batches (the log batches as they were first acquired); a batch keeps one state for all its
offsets until an operation touches part of it, and is then split into per-offset states
for good.

Pure and single-threaded: the log is read by the caller, which hands ``acquire`` the
(base, last) offsets of the batches it read. Acquisition locks are timer tasks on the
broker's timing wheel, one per acquired batch (or per acquired run of a split batch).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from enum import IntEnum
from typing import Callable, Iterator, NamedTuple, Sequence

from rivulet.common.types import ACKNOWLEDGE_GAP, AcknowledgeType
from rivulet.delayed import TimerTask, TimingWheel
from rivulet.protocol.errors import ApiError, ErrorCode

__all__ = [
    "AcknowledgeType",
    "AcknowledgementBatch",
    "AcquiredRecords",
    "RecordState",
    "SharePartition",
    "SharePartitionSnapshot",
    "StateBatch",
]


class RecordState(IntEnum):
    """Kafka's RecordState ids (also the values ``__share_group_state`` stores)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


# What an acknowledgement asks of an offset: an AcknowledgeType, or ACKNOWLEDGE_GAP.
AckKind = AcknowledgeType | int


@dataclass(frozen=True, slots=True)
class AcquiredRecords:
    first_offset: int
    last_offset: int
    delivery_count: int


class ShareAcquiredRecords(NamedTuple):
    """What an acquire took (Kafka's ShareAcquiredRecords): the records, and how many of them
    count toward the fetch's max records."""
    records: list[AcquiredRecords]
    count: int


@dataclass(frozen=True, slots=True)
class AcknowledgementBatch:
    """One acknowledgement: a single type for the whole range, or one type per offset."""

    first_offset: int
    last_offset: int
    acknowledge_types: Sequence[int]


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A run of offsets with one delivery state and count (Kafka's PersisterStateBatch)."""

    first_offset: int
    last_offset: int
    delivery_state: RecordState
    delivery_count: int


@dataclass(frozen=True, slots=True)
class SharePartitionSnapshot:
    """What a persister keeps of a share partition: acquisition locks do not survive, so
    Acquired records are written as Available (with their delivery counts)."""

    start_offset: int
    state_batches: tuple[StateBatch, ...]
    state_epoch: int = 0  # the persister's, bumped when an admin resets the state


_DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class _State:
    """One offset's (or a whole unsplit batch's) state."""

    __slots__ = ("state", "delivery_count", "member_id", "lock")

    def __init__(self, state: RecordState, delivery_count: int, member_id: str, lock: _LockTimeout | None) -> None:
        self.state = state
        self.delivery_count = delivery_count
        self.member_id = member_id
        self.lock = lock

    def copy(self) -> _State:
        return _State(self.state, self.delivery_count, self.member_id, self.lock)


class _Batch:
    """Offsets ``first..last``; ``whole`` until split, then ``offsets[i]`` is ``first + i``'s."""

    __slots__ = ("first", "last", "whole", "offsets")

    def __init__(self, first: int, last: int, whole: _State) -> None:
        self.first = first
        self.last = last
        self.whole: _State | None = whole
        self.offsets: list[_State] | None = None

    def split(self) -> list[_State]:
        if self.offsets is None:
            whole = self.whole
            assert whole is not None
            self.offsets = [whole.copy() for _ in range(self.last - self.first + 1)]
            if whole.lock is not None:
                whole.lock.holders += len(self.offsets) - 1
            self.whole = None
        return self.offsets

    def states_in(self, lo: int, hi: int) -> list[_State]:
        """The states of ``lo..hi`` (within the batch), split first unless that is the whole batch."""
        if self.whole is not None and lo == self.first and hi == self.last:
            return [self.whole]
        return self.split()[lo - self.first:hi - self.first + 1]

    def all_states(self) -> list[_State]:
        if self.whole is not None:
            return [self.whole]
        assert self.offsets is not None
        return self.offsets

    def states(self) -> Iterator[tuple[int, _State]]:
        if self.offsets is None:
            assert self.whole is not None
            for off in range(self.first, self.last + 1):
                yield off, self.whole
        else:
            yield from enumerate(self.offsets, self.first)


class _LockTimeout(TimerTask):
    """The acquisition lock of the states that point at it, in ``batches``; expiry releases
    those still Acquired. One fetch's records share one lock, so they come back together: with
    a lock per batch, deadlines a clock tick apart let a waiting fetch take the first batch
    alone, and an explicit-mode client poll half of what it had."""

    __slots__ = ("partition", "batches", "holders")

    def __init__(self, delay_ms: int, partition: SharePartition) -> None:
        super().__init__(delay_ms)
        self.partition = partition
        self.batches: list[_Batch] = []
        self.holders = 0  # states pointing at it: cancelled when none is left

    def run(self) -> None:
        self.partition._lock_expired(self)


class _Seen:
    """The offsets one request has acknowledged so far, as disjoint ranges: a request may not
    acknowledge an offset twice. Checked per range, not per offset."""

    __slots__ = ("firsts", "lasts")

    def __init__(self) -> None:
        self.firsts: list[int] = []
        self.lasts: list[int] = []

    def hits(self, lo: int, hi: int) -> bool:
        i = bisect_right(self.firsts, hi) - 1  # disjoint and sorted: lasts ascend with firsts
        return i >= 0 and self.lasts[i] >= lo

    def add(self, lo: int, hi: int) -> None:
        if self.lasts and self.lasts[-1] + 1 == lo:
            self.lasts[-1] = hi  # the usual order: ascending, adjacent
            return
        i = bisect_right(self.firsts, lo)
        self.firsts.insert(i, lo)
        self.lasts.insert(i, hi)


def _invalid_state(message: str) -> ApiError:
    return ApiError(ErrorCode.INVALID_RECORD_STATE, message)


def _invalid_request(message: str) -> ApiError:
    return ApiError(ErrorCode.INVALID_REQUEST, message)


class SharePartition:
    """The share-partition state machine. ``end_offset`` is exclusive; ``max_record_locks``
    bounds the in-flight window (``end_offset - start_offset``) that new records may grow."""

    def __init__(
        self,
        start_offset: int,
        timer: TimingWheel,
        *,
        lock_duration_ms: int = 30000,
        delivery_count_limit: int = 5,
        max_record_locks: int = 2000,
        on_available: Callable[[], None] | None = None,
        on_expired: Callable[[], None] | None = None,
        state_batches: Sequence[StateBatch] = (),
        state_epoch: int = 0,
    ) -> None:
        self._start = start_offset
        self.state_epoch = state_epoch
        self._end = start_offset
        self._timer = timer
        self.lock_duration_ms = lock_duration_ms
        self.delivery_count_limit = delivery_count_limit
        self.max_record_locks = max_record_locks
        # Told when records become Available again or the window moves (wakes long polls).
        self._on_available = on_available
        # Told when an acquisition lock expired and released or archived records: as Kafka,
        # that change is written, so the delivery counts it kept survive a restart.
        self._on_expired = on_expired
        self._batches: list[_Batch] = []
        self._firsts: list[int] = []

        for b in state_batches:  # as a persister last saw it
            if b.last_offset < self._end:
                continue
            first = max(b.first_offset, self._end)
            state = RecordState.AVAILABLE if b.delivery_state is RecordState.ACQUIRED else b.delivery_state
            self._batches.append(_Batch(first, b.last_offset, _State(state, b.delivery_count, "", None)))
            self._firsts.append(first)
            self._end = b.last_offset + 1
        self._advance_start()

    def set_limits(self, lock_duration_ms: int, delivery_count_limit: int, max_record_locks: int) -> None:
        """The group's share.record.lock.duration.ms, share.delivery.count.limit and
        share.partition.max.record.locks in force now: they may change between fetches."""
        self.lock_duration_ms = lock_duration_ms
        self.delivery_count_limit = delivery_count_limit
        self.max_record_locks = max_record_locks

    def snapshot(self) -> SharePartitionSnapshot:
        runs: list[StateBatch] = []
        for first, last, st in self._runs():
            state = RecordState.AVAILABLE if st.state is RecordState.ACQUIRED else st.state
            prev = runs[-1] if runs else None
            if prev is not None and prev.last_offset + 1 == first and prev.delivery_state is state \
                    and prev.delivery_count == st.delivery_count:
                runs[-1] = StateBatch(prev.first_offset, last, state, st.delivery_count)
            else:
                runs.append(StateBatch(first, last, state, st.delivery_count))
        return SharePartitionSnapshot(self._start, tuple(runs), self.state_epoch)

    # -- views ---------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self._end

    @property
    def in_flight_count(self) -> int:
        return self._end - self._start

    def state_of(self, offset: int) -> tuple[RecordState, int, str] | None:
        """(state, delivery count, member id) of an in-flight offset; None outside the window or in a gap."""
        if offset < self._start or offset >= self._end:
            return None
        found = self._find(offset)
        if found is None:
            return None
        batch, st = found
        return st.state, st.delivery_count, st.member_id

    def records(self) -> Iterator[tuple[int, RecordState, int, str]]:
        """Every tracked offset in the window: (offset, state, delivery count, member id)."""
        for batch in self._batches:
            for off, st in batch.states():
                if off >= self._start:
                    yield off, st.state, st.delivery_count, st.member_id

    def next_fetch_offset(self) -> int:
        """Where a fetch must read from: the first Available offset in the window, else ``end_offset``."""
        for first, _last, st in self._runs():
            if st.state is RecordState.AVAILABLE:
                return first
        return self._end

    def can_acquire(self) -> bool:
        """Whether a fetch could acquire anything: new records fit under the lock limit, or some are Available."""
        return self.in_flight_count < self.max_record_locks or self.next_fetch_offset() < self._end

    # -- acquire ---------------------------------------------------------------------

    def acquire(
        self,
        member_id: str,
        log_batches: Sequence[tuple[int, int]],
        max_records: int,
        *,
        record_limit: bool = False,
    ) -> ShareAcquiredRecords:
        """Acquire for ``member_id`` what the fetched log batches (base, last offsets, ascending)
        hold: Available offsets of the window and new offsets past ``end_offset``. At most
        ``max_records`` records, rounded up to the end of a log batch unless ``record_limit``
        (ShareAcquireMode record_limit); new records only up to ``max_record_locks`` in the
        window, cutting a log batch if need be (Kafka hands out the whole batch). The rest of a
        batch cut earlier does not count toward ``max_records`` unless ``record_limit``: Kafka
        would have handed it out with the batch's first part, so a fetch goes on from it as
        Kafka's would from the next batch, up to the lock limit. Returns the records acquired
        and how many of them counted toward ``max_records``."""
        if max_records <= 0:
            return ShareAcquiredRecords([], 0)
        acquired: list[AcquiredRecords] = []
        budget = max_records
        lock: list[_LockTimeout] = []  # this fetch's one acquisition lock, once made
        for base, last in log_batches:
            if budget <= 0:
                break
            if last < self._start:
                continue
            first = max(base, self._start)
            if first < self._end:
                budget -= self._acquire_cached(member_id, first, min(last, self._end - 1), budget,
                                               record_limit, acquired, lock)
                first = self._end
            if first > last or budget <= 0:
                continue
            locks = self.max_record_locks - self.in_flight_count
            if locks <= 0:
                break
            # max_records may be rounded up to the batch's end, the lock limit never is: the
            # rest of a batch cut at the limit is new records for a later fetch.
            stop = last if not record_limit or last - first + 1 <= budget else first + budget - 1
            stop = min(stop, first + locks - 1)
            if record_limit or base == first:  # base < first: the rest of a batch cut earlier
                budget -= stop - first + 1
            self._add_new(member_id, first, stop, lock)
            acquired.append(AcquiredRecords(first, stop, 1))
        return ShareAcquiredRecords(merge_acquired(acquired), max_records - budget)

    def _add_new(self, member_id: str, first: int, last: int, lock: list[_LockTimeout]) -> None:
        batch = _Batch(first, last, _State(RecordState.ACQUIRED, 1, member_id, None))
        assert batch.whole is not None
        _hold(batch.whole, self._schedule(batch, lock))
        self._batches.append(batch)
        self._firsts.append(first)
        self._end = last + 1

    def _acquire_cached(
        self, member_id: str, first: int, last: int, budget: int, record_limit: bool,
        out: list[AcquiredRecords], lock: list[_LockTimeout],
    ) -> int:
        count = 0
        for batch in self._overlapping(first, last):
            if count >= budget:
                break  # batch-optimized mode rounds up to a batch's end, not further
            whole = batch.whole
            if whole is not None:
                if whole.state is not RecordState.AVAILABLE:
                    continue
                n = batch.last - batch.first + 1
                if first <= batch.first and batch.last <= last and (not record_limit or count + n <= budget):
                    _hold(whole, self._schedule(batch, lock))
                    self._take(whole, member_id)
                    out.append(AcquiredRecords(batch.first, batch.last, whole.delivery_count))
                    count += n
                    continue
            offsets = batch.split()
            for off in range(max(first, batch.first), min(last, batch.last) + 1):
                if record_limit and count >= budget:
                    break
                st = offsets[off - batch.first]
                if st.state is not RecordState.AVAILABLE:
                    continue
                _hold(st, self._schedule(batch, lock))
                self._take(st, member_id)
                out.append(AcquiredRecords(off, off, st.delivery_count))
                count += 1
        return count

    @staticmethod
    def _take(st: _State, member_id: str) -> None:
        st.state = RecordState.ACQUIRED
        st.delivery_count += 1
        st.member_id = member_id

    def _schedule(self, batch: _Batch, shared: list[_LockTimeout]) -> _LockTimeout:
        """The lock ``shared`` holds (made and started at its first use) now also covering ``batch``."""
        if not shared:
            shared.append(_LockTimeout(self.lock_duration_ms, self))
            self._timer.add(shared[0])
        task = shared[0]
        if not task.batches or task.batches[-1] is not batch:
            task.batches.append(batch)
        return task

    def unacquire(self, member_id: str, acquired: Sequence[AcquiredRecords]) -> None:
        """Take back an acquisition whose records never went out (a ShareFetch answered empty
        because its client is over a quota): Available again, with the delivery count they had."""
        for rec in acquired:
            for batch in self._overlapping(rec.first_offset, rec.last_offset):
                for st in batch.states_in(max(rec.first_offset, batch.first), min(rec.last_offset, batch.last)):
                    if st.state is RecordState.ACQUIRED and st.member_id == member_id:
                        st.delivery_count -= 1
                        self._settle(st, RecordState.AVAILABLE)
        self._after_change(released=True)

    # -- acknowledge -------------------------------------------------------------------

    def acknowledge(self, member_id: str, batches: Sequence[AcknowledgementBatch]) -> None:
        """Apply ``member_id``'s acknowledgements, all or none: ACCEPT makes records
        Acknowledged, RELEASE Available again (Archived at the delivery limit), REJECT and GAP
        Archived, RENEW restarts their acquisition lock. Raises ``ApiError``: INVALID_REQUEST
        for a malformed batch or offsets past the acquired ones, INVALID_RECORD_STATE for
        records not Acquired by this member."""
        plan: list[tuple[_Batch, int, int, AckKind]] = []
        seen = _Seen()
        for ack in batches:
            plan.extend(self._validate(member_id, ack, seen))
        renewed: list[_LockTimeout] = []  # this request's one renewed lock, once made
        for batch, lo, hi, kind in plan:
            self._apply(batch, lo, hi, kind, renewed)
        self._after_change(released=any(k is AcknowledgeType.RELEASE for _, _, _, k in plan))

    def _validate(
        self, member_id: str, ack: AcknowledgementBatch, seen: _Seen,
    ) -> list[tuple[_Batch, int, int, AckKind]]:
        first, last, types = ack.first_offset, ack.last_offset, list(ack.acknowledge_types)
        if first > last:
            raise _invalid_request("The first offset is greater than the last offset.")
        if len(types) != 1 and len(types) != last - first + 1:
            raise _invalid_request("The number of acknowledge types does not match the batch.")
        kinds = _acknowledge_types(types)
        if last < self._start:
            raise _invalid_state("Batch record not found. The request batch offsets are not found in the cache.")
        if last >= self._end:
            raise _invalid_request("Batch record not found. The last offset in request is past acquired records.")
        plan: list[tuple[_Batch, int, int, AckKind]] = []
        lo_req = max(first, self._start)
        single = kinds[0] if len(kinds) == 1 else None
        for batch in self._overlapping(lo_req, last):
            lo, hi = max(lo_req, batch.first), min(last, batch.last)
            _check_held(batch, lo, hi, member_id, seen)
            if single is not None:
                plan.append((batch, lo, hi, single))
                if single is not AcknowledgeType.RENEW:
                    seen.add(lo, hi)
            else:
                for off in range(lo, hi + 1):
                    kind = kinds[off - first]
                    plan.append((batch, off, off, kind))
                    if kind is not AcknowledgeType.RENEW:
                        seen.add(off, off)
        return plan

    def _apply(self, batch: _Batch, lo: int, hi: int, kind: AckKind,
               renewed: list[_LockTimeout]) -> None:
        targets = batch.states_in(lo, hi)
        if kind is AcknowledgeType.RENEW:
            lock = self._schedule(batch, renewed)
            for st in targets:
                _hold(st, lock)
            return
        for st in targets:
            if kind is AcknowledgeType.ACCEPT:
                self._settle(st, RecordState.ACKNOWLEDGED)
            elif kind is AcknowledgeType.RELEASE:
                self._release(st)
            else:
                self._settle(st, RecordState.ARCHIVED)

    @staticmethod
    def _settle(st: _State, state: RecordState) -> None:
        st.state = state
        st.member_id = ""
        _hold(st, None)

    def _release(self, st: _State) -> None:
        at_limit = st.delivery_count >= self.delivery_count_limit
        self._settle(st, RecordState.ARCHIVED if at_limit else RecordState.AVAILABLE)

    # -- releases that are not acknowledgements ---------------------------------------

    def release_member(self, member_id: str) -> bool:
        """Release every record ``member_id`` holds (its share session closed, or it left);
        whether it held any."""
        released = False
        for batch in self._batches:
            for st in batch.all_states():
                if st.state is RecordState.ACQUIRED and st.member_id == member_id:
                    self._release(st)
                    released = True
        if released:
            self._after_change(released=True)
        return released

    def release_all(self) -> None:
        """Release every acquired record and cancel its lock (the share partition is closing)."""
        for batch in self._batches:
            for st in batch.all_states():
                if st.state is RecordState.ACQUIRED:
                    self._release(st)
        self._advance_start()

    def _lock_expired(self, task: _LockTimeout) -> None:
        released = False
        for batch in task.batches:
            for st in batch.all_states():
                if st.lock is task and st.state is RecordState.ACQUIRED:
                    self._release(st)
                    released = True
        if released:
            self._after_change(released=True)
            if self._on_expired is not None:
                self._on_expired()

    def archive_before(self, log_start_offset: int) -> None:
        """The log start offset moved past the SPSO (retention, DeleteRecords): what lies
        below it can no longer be delivered, so it is Archived and the window starts there."""
        if log_start_offset <= self._start:
            return
        self._archive(self._start, log_start_offset - 1, (RecordState.AVAILABLE, RecordState.ACQUIRED))
        self._start = log_start_offset
        self._end = max(self._end, log_start_offset)
        self._after_change(released=True)

    def archive_acquired(self, first: int, last: int) -> None:
        """Archive the Acquired records of ``first..last``: records the group must never be
        given (a read_committed group's aborted transactions)."""
        self._archive(first, last, (RecordState.ACQUIRED,))
        self._advance_start()

    def _archive(self, first: int, last: int, states: tuple[RecordState, ...]) -> None:
        for batch in self._overlapping(first, last):
            for st in batch.states_in(max(first, batch.first), min(last, batch.last)):
                if st.state in states:
                    self._settle(st, RecordState.ARCHIVED)

    # -- internals -----------------------------------------------------------------------

    def _runs(self) -> Iterator[tuple[int, int, _State]]:
        """(first, last, state) from the SPSO on: one run per unsplit batch, one per offset of a split one."""
        start = self._start
        for batch in self._batches:
            if batch.last < start:
                continue
            if batch.whole is not None:
                yield max(batch.first, start), batch.last, batch.whole
            else:
                assert batch.offsets is not None
                for off in range(max(batch.first, start), batch.last + 1):
                    yield off, off, batch.offsets[off - batch.first]

    def _find(self, offset: int) -> tuple[_Batch, _State] | None:
        i = bisect_right(self._firsts, offset) - 1
        if i < 0:
            return None
        batch = self._batches[i]
        if offset > batch.last:
            return None
        if batch.whole is not None:
            return batch, batch.whole
        assert batch.offsets is not None
        return batch, batch.offsets[offset - batch.first]

    def _overlapping(self, first: int, last: int) -> list[_Batch]:
        i = max(bisect_right(self._firsts, first) - 1, 0)
        out = []
        for batch in self._batches[i:]:
            if batch.first > last:
                break
            if batch.last >= first:
                out.append(batch)
        return out

    def _after_change(self, *, released: bool) -> None:
        start = self._start
        self._advance_start()
        # Released records can be acquired again, and a start that moved frees record locks
        # (group.share.partition.max.record.locks): either may complete a waiting ShareFetch.
        if (released or self._start != start) and self._on_available is not None:
            self._on_available()

    def _advance_start(self) -> None:
        """Move the SPSO past the prefix of Acknowledged and Archived records; drop whole batches below it."""
        start = self._start
        drop = 0
        for batch in self._batches:
            if batch.last < start:
                drop += 1
                continue
            # offsets between batches (compacted away) are passed over
            start = max(start, batch.first)
            if batch.whole is not None:
                if batch.whole.state not in _DONE:
                    break
                start = batch.last + 1
                drop += 1
                continue
            assert batch.offsets is not None
            stopped = False
            for st in batch.offsets[start - batch.first:]:
                if st.state not in _DONE:
                    stopped = True
                    break
                start += 1
            if stopped:
                break
            drop += 1
        else:
            start = max(start, self._end)
        if drop:
            del self._batches[:drop]
            del self._firsts[:drop]
        self._start = start


def _hold(st: _State, lock: _LockTimeout | None) -> None:
    """Point ``st`` at ``lock``; a lock no state points at any more is cancelled."""
    old = st.lock
    if old is lock:
        return
    st.lock = lock
    if lock is not None:
        lock.holders += 1
    if old is not None:
        old.holders -= 1
        if old.holders == 0:
            old.cancel()


def merge_acquired(acquired: list[AcquiredRecords]) -> list[AcquiredRecords]:
    """Join adjacent ranges of the same delivery count, as a response carries them."""
    out: list[AcquiredRecords] = []
    for rec in acquired:
        if out and out[-1].last_offset + 1 == rec.first_offset and out[-1].delivery_count == rec.delivery_count:
            out[-1] = AcquiredRecords(out[-1].first_offset, rec.last_offset, rec.delivery_count)
        else:
            out.append(rec)
    return out


def _acknowledge_types(types: list[int]) -> list[AckKind]:
    kinds: list[AckKind] = []
    for t in types:
        if t == ACKNOWLEDGE_GAP:
            kinds.append(ACKNOWLEDGE_GAP)
            continue
        try:
            kinds.append(AcknowledgeType(t))
        except ValueError:
            raise _invalid_request(f"Invalid acknowledge type: {t}") from None
    return kinds


def _check_held(batch: _Batch, lo: int, hi: int, member_id: str, seen: _Seen) -> None:
    """Offsets lo..hi of ``batch`` are acquired by ``member_id`` and not acknowledged earlier in
    the same request, else INVALID_RECORD_STATE as Kafka answers."""
    not_acquired = "The batch cannot be acknowledged. The batch is not in the acquired state."
    whole = batch.whole
    if whole is not None:  # one state for all its offsets: checked once, as offset lo would be
        if whole.state is not RecordState.ACQUIRED or seen.hits(lo, lo):
            raise _invalid_state(not_acquired)
        if whole.member_id != member_id:
            raise _invalid_state("Member is not the owner of batch record")
        if seen.hits(lo, hi):
            raise _invalid_state(not_acquired)
        return
    offsets = batch.split()
    for off in range(lo, hi + 1):
        st = offsets[off - batch.first]
        if st.state is not RecordState.ACQUIRED or seen.hits(off, off):
            raise _invalid_state(not_acquired)
        if st.member_id != member_id:
            raise _invalid_state("Member is not the owner of batch record")
