"""Regular expressions with RE2's syntax and guarantees, as Kafka matches them with RE2/J
(consumer groups' topic subscriptions, ListTransactions' id pattern)."""

from __future__ import annotations

from typing import Any

import re2

_QUIET = re2.Options()
_QUIET.log_errors = False  # a client's bad pattern is answered, not written to stderr


class InvalidRegex(ValueError):
    """The pattern does not compile; the message says why in RE2/J's words (its
    PatternSyntaxException description, which Kafka puts in its error messages)."""


# RE2's error text ("missing ): orders-(") starts with its error code's words; RE2/J 1.8, which
# Kafka 4.3 uses, words the same errors as below and leaves the pattern out. RE2/J reports a
# stray ")" as an internal error.
_RE2J_WORDS = {
    "missing )": "missing closing )",
    "unexpected )": "regexp/syntax: internal error",
    "missing ]": "missing closing ]",
    "bad repetition operator": "invalid nested repetition operator",
    "trailing \\": "trailing backslash at end of expression",
    "invalid repetition size": "invalid repeat count",
    "invalid escape sequence": "invalid escape sequence",
    "invalid character class range": "invalid character class range",
    "invalid character class": "invalid character class",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
    "duplicate capture group name": "duplicate capture group name",
}


def _re2j_description(re2_text: str) -> str:
    code = re2_text.split(": ", 1)[0] if ": " in re2_text else re2_text
    return _RE2J_WORDS.get(code, re2_text)


def compile_re2(pattern: str) -> Any:  # Any: google-re2 ships no types for its compiled patterns
    """The compiled pattern (use ``fullmatch`` to match a whole name, as Kafka's ``matches()``)."""
    try:
        return re2.compile(pattern, _QUIET)
    except re2.error as e:
        reason = e.args[0] if e.args else "invalid pattern"
        text = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
        raise InvalidRegex(_re2j_description(text)) from None
