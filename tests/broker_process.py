"""Kept for helpers that import it by its old name; use rivulet.testing."""

from rivulet.testing import BrokerProcess, free_port  # noqa: F401
