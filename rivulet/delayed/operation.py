"""``DelayedOperation``: a request that waits for an event or a timeout.

Kafka's contract, minus the locks (the broker is single-threaded):
``force_complete`` flips the operation to completed exactly once, whichever
of "an event satisfied it" (``try_complete`` -> ``force_complete``) or "the
timer expired" (``run`` -> ``force_complete`` -> ``on_expiration``) gets
there first; the loser's call returns False and does nothing.
"""

from __future__ import annotations

from typing import Protocol

from .timing_wheel import TimerTask

__all__ = ["DelayedOperation", "OperationCounts"]


class OperationCounts(Protocol):
    """What an operation tells the purgatory that counts it among its delayed ones."""

    def _record_expiration(self) -> None: ...

    def _left_timer(self) -> None: ...


class DelayedOperation(TimerTask):
    """Base class for delayed produce/fetch/join/heartbeat operations.

    Subclasses implement :meth:`try_complete`, :meth:`on_complete` and
    :meth:`on_expiration`.  Instances are watched by identity, so subclasses
    may define ``__eq__`` freely.
    """

    __slots__ = ("_completed", "_purgatory")

    def __init__(self, delay_ms: int) -> None:
        super().__init__(int(delay_ms))
        self._completed = False
        # Set while the operation is counted in a purgatory's delayed().
        self._purgatory: OperationCounts | None = None

    # -- to implement ---------------------------------------------------------

    def try_complete(self) -> bool:
        """Check whether the operation can complete now.

        If it can, call ``force_complete()`` and return its result; otherwise
        return False.  Called when an event fires for one of its keys.
        """
        raise NotImplementedError

    def on_complete(self) -> None:
        """Do the completion work (e.g. send the response).  Runs exactly once."""
        raise NotImplementedError

    def on_expiration(self) -> None:
        """Called after ``on_complete`` when the completion was due to the timeout."""
        raise NotImplementedError

    # -- contract ---------------------------------------------------------------

    @property
    def is_completed(self) -> bool:
        return self._completed

    def counted_in(self, purgatory: OperationCounts) -> None:
        """The purgatory that timed this operation counts it among its delayed ones until it
        leaves the timer (completed, expired or cancelled)."""
        self._purgatory = purgatory

    def force_complete(self) -> bool:
        """Complete now, unless already completed.  True iff this call completed it.

        Cancels the timeout before calling ``on_complete`` so a completion
        triggered from inside ``on_complete`` cannot run it twice.
        """
        if self._completed:
            return False
        self._completed = True
        self.cancel()
        self.on_complete()
        return True

    def safe_try_complete(self) -> bool:
        """``try_complete`` unless already completed (then False)."""
        if self._completed:
            return False
        return self.try_complete()

    def run(self) -> None:
        """Timer expiry: force completion; if that won, report the expiration."""
        purgatory = self._purgatory
        if self.force_complete():
            if purgatory is not None:
                purgatory._record_expiration()
            self.on_expiration()

    def cancel(self) -> None:
        """Remove the timeout without completing (see ``cancel_for_key``)."""
        TimerTask.cancel(self)
        purgatory = self._purgatory
        if purgatory is not None:
            self._purgatory = None
            purgatory._left_timer()
