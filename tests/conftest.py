from __future__ import annotations

import pytest

from rivulet.testing import BrokerProcess


@pytest.fixture(scope="module")
def broker():
    """One broker per test module, shared by its tests (each test uses its own topics)."""
    b = BrokerProcess().start()
    yield b
    b.cleanup()


@pytest.fixture
def broker_factory():
    made: list[BrokerProcess] = []

    def make(overrides: dict[str, str] | None = None) -> BrokerProcess:
        b = BrokerProcess(overrides)
        made.append(b)
        return b.start()

    yield make
    for b in made:
        b.cleanup()
