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
    code, _, where = re2_text.partition(": ")
    if code == "invalid perl operator" and where.startswith("(?<"):
        return "invalid named capture"  # RE2/J reads "(?<" as a named group: lookbehinds fail there
    return _RE2J_WORDS.get(code, re2_text)


def _refused_by_re2j_only(pattern: str) -> str | None:
    """What RE2/J refuses in a pattern RE2 accepts: ``\\C`` (any byte) outside a class, and a
    group name used twice. The scan skips escapes, ``\\Q...\\E`` and character classes."""
    names: set[str] = set()
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1:i + 2]
            if nxt == "C" and not in_class:
                return "invalid escape sequence"
            if nxt == "Q" and not in_class:
                end = pattern.find("\\E", i + 2)
                i = n if end < 0 else end + 2
                continue
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            i += 1
            i += pattern[i:i + 1] == "^"
            i += pattern[i:i + 1] == "]"  # a "]" first in a class is literal
            continue
        elif pattern.startswith(("(?P<", "(?<"), i):
            start = i + (4 if pattern[i + 2] == "P" else 3)
            end = pattern.find(">", start)
            if end > 0:
                if pattern[start:end] in names:
                    return "duplicate capture group name"
                names.add(pattern[start:end])
        i += 1
    return None


def compile_re2(pattern: str) -> Any:  # Any: google-re2 ships no types for its compiled patterns
    """The compiled pattern (use ``fullmatch`` to match a whole name, as Kafka's ``matches()``)."""
    try:
        compiled = re2.compile(pattern, _QUIET)
    except re2.error as e:
        reason = e.args[0] if e.args else "invalid pattern"
        text = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
        raise InvalidRegex(_re2j_description(text)) from None
    refused = _refused_by_re2j_only(pattern)
    if refused is not None:
        raise InvalidRegex(refused)
    return compiled
