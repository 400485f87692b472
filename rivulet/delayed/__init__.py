"""Delayed operations: a hierarchical timing wheel and Kafka-style purgatories."""

from .metrics import RateMeter
from .operation import DelayedOperation
from .purgatory import DelayedOperationPurgatory
from .timer import Timer, monotonic_ms
from .timing_wheel import TimerTask, TimingWheel

__all__ = [
    "DelayedOperation",
    "DelayedOperationPurgatory",
    "RateMeter",
    "Timer",
    "TimerTask",
    "TimingWheel",
    "monotonic_ms",
]
