"""Who a connection is (Kafka's KafkaPrincipal): set once its listener has authenticated it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str
    # Authenticated with a delegation token: such a connection may not ask for tokens (Kafka's
    # tokenAuthenticated, left out of equality as Kafka's).
    token_authenticated: bool = field(default=False, compare=False)

    ANONYMOUS: ClassVar[KafkaPrincipal]

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` (ACL bindings and ``super.users`` write principals this way)."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"'{text}' is not a principal of the form Type:name")
        return cls(kind, name)


USER_TYPE = "User"
# What PLAINTEXT listeners (no authentication) give every connection, as Kafka's.
KafkaPrincipal.ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
