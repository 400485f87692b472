"""Regular expressions with RE2's syntax and guarantees, as Kafka matches them with RE2/J
(consumer groups' topic subscriptions, ListTransactions' id pattern)."""

from __future__ import annotations

from typing import Any

import re2

_QUIET = re2.Options()
_QUIET.log_errors = False  # a client's bad pattern is answered, not written to stderr


class InvalidRegex(ValueError):
    """The pattern does not compile; the message says why, as RE2 does."""


def compile_re2(pattern: str) -> Any:  # Any: google-re2 ships no types for its compiled patterns
    """The compiled pattern (use ``fullmatch`` to match a whole name, as Kafka's ``matches()``)."""
    try:
        return re2.compile(pattern, _QUIET)
    except re2.error as e:
        reason = e.args[0] if e.args else "invalid pattern"
        raise InvalidRegex(reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)) from None
