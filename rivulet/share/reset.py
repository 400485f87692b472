"""``share.auto.offset.reset``: where a share partition without state starts."""

from __future__ import annotations

import re
from typing import Callable

__all__ = ["initial_start_offset", "parse_duration_ms"]

# java.time.Duration's text form, as the by_duration strategy takes it: PnDTnHnMn.nS
_ISO = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d{1,9})?)S)?)?", re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """Milliseconds of a ``PnDTnHnMn.nS`` duration; ValueError if it is not one."""
    m = _ISO.fullmatch(text.strip())
    if m is None or not any(m.groups()) or text.strip().upper().endswith("T"):
        raise ValueError(f"not a duration: {text!r}")
    days, hours, minutes, seconds = (g or "0" for g in m.groups())
    return ((int(days) * 24 + int(hours)) * 60 + int(minutes)) * 60_000 + round(float(seconds) * 1000)


def initial_start_offset(
    strategy: str,
    *,
    log_start_offset: int,
    latest_offset: int,
    now_ms: int,
    offset_for_timestamp: Callable[[int], int | None],
) -> int:
    """The SPSO of a share partition the group has no state for: ``earliest`` the log start
    offset, ``latest`` (the default) the latest offset, ``by_duration:<d>`` the first offset
    whose timestamp is at least now minus ``d`` (the latest offset when there is none)."""
    text = strategy.strip().lower()
    if text == "earliest":
        return log_start_offset
    if text.startswith("by_duration:"):
        found = offset_for_timestamp(now_ms - parse_duration_ms(text[len("by_duration:"):]))
        return latest_offset if found is None else max(found, log_start_offset)
    return latest_offset
