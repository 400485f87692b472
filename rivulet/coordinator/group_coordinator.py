"""GroupCoordinator: placeholder until the classic group protocol lands."""

from __future__ import annotations

from typing import Any


class GroupCoordinator:
    def __init__(self, broker: Any) -> None:
        self.broker = broker

    def register_apis(self, apis: Any) -> None:
        pass

    def startup(self) -> None:
        pass

    def shutdown(self) -> None:
        pass
