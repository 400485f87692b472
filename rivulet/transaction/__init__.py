"""Exactly-once: the transaction coordinator over ``__transaction_state`` (see coordinator.py)."""

from rivulet.transaction.coordinator import TransactionCoordinator

__all__ = ["TransactionCoordinator"]
