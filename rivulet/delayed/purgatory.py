"""``DelayedOperationPurgatory``: watch delayed operations by key, expire them by timer.

An operation (one per request) is watched under every key it depends on
(e.g. each partition of a produce request); an event on a key calls
``check_and_complete(key)``, which tries the operations watched there.  The
timer forces the ones nobody completed in time.

A completed operation is dropped only from the watch list of the key that
completed it; checking every other key at that moment would cost too much.
A reaper purges the leftovers once about ``purge_interval`` of them have
piled up.  Like Kafka, the pile is estimated as "operations ever watched
since the last purge" minus "operations still pending in the timer".

Kafka purges on its reaper thread; here the purge shares the one event loop,
so it goes a slice of keys per timer pass (about ``PURGE_SLICE`` watch
entries each): 1,000 completed Fetches of 1,000 partitions are a million
entries, a stall of the loop of a hundred milliseconds or more in one go.
"""

from __future__ import annotations

from typing import Any, Generic, Hashable, Iterable, TypeVar

from rivulet.protocol.accel import speedups

from .metrics import RateMeter
from .operation import DelayedOperation
from .timer import Timer
from .timing_wheel import TimerTask

__all__ = ["DelayedOperationPurgatory"]

T = TypeVar("T", bound=DelayedOperation)

# Watch entries a purge looks at per timer pass (whole keys: a key's list is never split).
PURGE_SLICE = 20_000


def _py_watch_keys(watchers: dict[Hashable, dict[int, T]], keys: list[Hashable], ident: int, op: T) -> None:
    """watchers[key][ident] = op for every key: the reference of ``_speedups.watch_keys``."""
    for key in keys:
        w = watchers.get(key)
        if w is None:
            w = watchers[key] = {}
        w[ident] = op


def _drop_completed(w: dict[int, T]) -> int:
    """Delete the completed operations of a watch list; how many. (In C it costs the same:
    the walk of a million entries is memory-bound, about 60 ns an entry either way.)"""
    dead = [ident for ident, op in w.items() if op._completed]
    for ident in dead:
        del w[ident]
    return len(dead)


# The C version when the accelerator is built: one call for a Fetch's 1,000 keys.
_speedups = speedups()
_watch_keys = _py_watch_keys if _speedups is None else _speedups.watch_keys


class _Reaper(TimerTask):
    """Runs a slice of the purge on the timer's next pass, off the caller's stack."""

    __slots__ = ("_purgatory",)

    def __init__(self, purgatory: DelayedOperationPurgatory[Any]) -> None:  # Any: of any operation type
        super().__init__(0)
        self._purgatory = purgatory

    def run(self) -> None:
        self._purgatory._purge_slice(PURGE_SLICE)


class DelayedOperationPurgatory(Generic[T]):
    """Kafka's DelayedOperationPurgatory for one kind of operation.

    The timer may be shared between purgatories; ``delayed()`` counts only
    this purgatory's operations and ``shutdown()`` leaves the timer running.
    """

    def __init__(self, name: str, timer: Timer, purge_interval: int = 1000) -> None:
        self.name = name
        self._timer = timer
        self._purge_interval = purge_interval
        # key -> {id(op): op}: insertion-ordered, O(1) removal, identity-keyed.
        self._watchers: dict[Hashable, dict[int, T]] = {}
        self._num_delayed = 0
        self._estimated_total = 0
        self._reaper = _Reaper(self)
        # The keys a purge under way has still to look at (None: no purge under way).
        self._purge_keys: list[Hashable] | None = None
        self._expirations = RateMeter(timer.clock)
        self._closed = False

    # -- main API ---------------------------------------------------------------

    def try_complete_else_watch(self, operation: T, keys: Iterable[Hashable], *, recheck: bool = True) -> bool:
        """Complete ``operation`` now if possible, else watch it and time it.

        Check; watch under every key; check again (an event may have fired
        between the first check and the watch, and nobody would try the
        operation again); only then add it to the timer.  Returns True if the
        operation is completed on return (it is then not in the timer).

        ``recheck=False`` skips the second check, for an operation whose check
        fires no event: on this one thread nothing else runs between the two, so
        it would see what the first saw (Kafka's is for other threads' events).
        """
        if self._closed:
            raise RuntimeError(f"purgatory {self.name} is shut down")
        keys = list(keys)
        if not keys:
            raise ValueError("an operation must be watched under at least one key")
        if operation.safe_try_complete() or operation._completed:
            return True
        _watch_keys(self._watchers, keys, id(operation), operation)
        self._estimated_total += 1
        if recheck and (operation.safe_try_complete() or operation._completed):
            # Watched but done: it now counts towards the purge estimate.
            self._maybe_purge()
            return True
        # add() never runs user code, so the operation cannot complete in
        # between (Kafka re-checks here because of other threads).
        self._timer.add(operation)
        if operation.is_scheduled:  # not if it was cancelled earlier
            operation.counted_in(self)
            self._num_delayed += 1
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Try every operation watched under ``key``; returns how many this call completed.

        Completed operations leave this key's list.  An operation's callbacks
        may watch, complete or cancel operations on this very key: the loop
        runs over a snapshot and re-checks membership.
        """
        w = self._watchers.get(key)
        if w is None:
            return 0
        completed = 0
        for ident, op in list(w.items()):
            if ident not in w:
                continue  # completed or cancelled by a callback meanwhile
            if op._completed:
                del w[ident]
            elif op.safe_try_complete():
                completed += 1
                w.pop(ident, None)
            elif op._completed:
                w.pop(ident, None)  # completed re-entrantly, by someone else
        if not w and self._watchers.get(key) is w:
            del self._watchers[key]
        return completed

    def cancel_for_key(self, key: Hashable) -> list[T]:
        """Stop watching ``key``; cancel the timeouts of its pending operations.

        Returns those operations (not completed, never to expire) so the
        caller can answer them.  They stay watched under their other keys.
        """
        w = self._watchers.pop(key, None)
        if not w:
            return []
        ops = [op for op in w.values() if not op._completed]
        w.clear()
        for op in ops:
            op.cancel()
        return ops

    def watched(self) -> int:
        """Watch-list entries over all keys (an operation counts once per key)."""
        return sum(map(len, self._watchers.values()))

    def delayed(self) -> int:
        """Operations of this purgatory pending in the timer."""
        return self._num_delayed

    def watched_keys(self) -> int:
        return len(self._watchers)

    def purge_completed(self) -> int:
        """Drop completed operations from every watch list at once; returns how many.

        The reaper does the same a slice per timer pass; this one begins afresh, in place of
        a purge under way.
        """
        self._reaper.cancel()
        self._purge_keys = None
        return self._purge_slice(None)

    def _purge_slice(self, budget: int | None) -> int:
        """Go on with the purge under way, or begin one, for about ``budget`` watch entries
        (None: to the end); the reaper comes back on the next pass for the rest."""
        keys = self._purge_keys
        if keys is None:
            # Kafka's estimate restarts from the pending operations when a purge begins.
            self._estimated_total = self._num_delayed
            keys = self._purge_keys = list(self._watchers)
        purged = 0
        watchers = self._watchers
        while keys and (budget is None or budget > 0):
            key = keys.pop()
            w = watchers.get(key)
            if w is None:
                continue  # cancelled, or emptied by a check since the purge began
            if budget is not None:
                budget -= len(w)
            purged += _drop_completed(w)
            if not w and watchers.get(key) is w:
                del watchers[key]
        if keys:
            if not self._reaper.is_scheduled and not self._timer.is_shutdown:
                self._timer.add(self._reaper)
        else:
            self._purge_keys = None
        return purged

    def expirations(self) -> int:
        """Operations that expired since the purgatory was made (Kafka's ExpiresPerSec count)."""
        return self._expirations.count

    def metrics(self) -> dict[str, float]:
        """Gauges named after Kafka's: PurgatorySize, NumDelayedOperations, ..."""
        return {
            "purgatory_size": self.watched(),
            "num_delayed_operations": self._num_delayed,
            "watched_keys": len(self._watchers),
            "expirations_total": self._expirations.count,
            "expirations_per_sec": self._expirations.rate(),
        }

    def shutdown(self) -> None:
        """Stop the reaper, cancel every pending timeout and forget all watchers.

        Pending operations are dropped without completion; the (possibly
        shared) timer keeps running.
        """
        self._closed = True
        self._reaper.cancel()
        self._purge_keys = None
        watchers = self._watchers
        self._watchers = {}
        for w in watchers.values():
            for op in w.values():
                op.cancel()
        self._estimated_total = self._num_delayed = 0

    # -- bookkeeping called by DelayedOperation --------------------------------

    def _left_timer(self) -> None:
        # Completed (or cancelled): one more candidate for purging.
        self._num_delayed -= 1
        self._maybe_purge()

    def _record_expiration(self) -> None:
        self._expirations.mark()

    def _maybe_purge(self) -> None:
        if (
            self._estimated_total - self._num_delayed > self._purge_interval
            and self._purge_keys is None
            and not self._reaper.is_scheduled
            and not self._closed
            and not self._timer.is_shutdown
        ):
            self._timer.add(self._reaper)
