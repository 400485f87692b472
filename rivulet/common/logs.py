"""How Rivulet's processes log: levels per logger, text or JSON lines, an optional rotating
file, and a filter that keeps repeated warnings from flooding the log.

The set-up is the standard library's (``logging.config.dictConfig``, ``RotatingFileHandler``);
JSON lines come from python-json-logger, so a record's ``extra`` fields (the slow-request
log's timings, a warning's ``kind``) become JSON fields of their own.
"""

from __future__ import annotations

import logging
import logging.config
import os
import sys
import time
from collections.abc import Callable, Iterable
from typing import IO, Any

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_FORMATS = ("text", "json")
# Python has no TRACE; log4j's OFF is a level no record reaches.
_LEVEL_NAMES = {"trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
                "warning": logging.WARNING, "error": logging.ERROR, "fatal": logging.CRITICAL,
                "critical": logging.CRITICAL, "off": logging.CRITICAL + 10}
ROOT = ""  # the root logger's key in a level map


def parse_level(name: str) -> int:
    level = _LEVEL_NAMES.get(name.strip().lower())
    if level is None:
        raise ValueError(f"unknown log level '{name.strip()}'; known: {', '.join(_LEVEL_NAMES)}")
    return level


def parse_levels(specs: Iterable[str], default: int = logging.INFO) -> dict[str, int]:
    """``--log-level`` values: each a comma-separated list of ``LEVEL`` (the root logger's) or
    ``LOGGER=LEVEL`` items; later items win. The root level is ``default`` unless given."""
    levels: dict[str, int] = {ROOT: default}
    for spec in specs:
        for item in spec.split(","):
            if not item.strip():
                continue
            name, eq, level = item.rpartition("=")
            if eq and not name.strip():
                raise ValueError(f"'{item.strip()}' names no logger; give LOGGER=LEVEL or a plain LEVEL")
            levels[name.strip()] = parse_level(level)
    return levels


def json_formatter() -> logging.Formatter:
    """One JSON object per record: time (ISO 8601, UTC), level, logger, message, and the
    record's extra fields."""
    from pythonjsonlogger.json import JsonFormatter
    return JsonFormatter("%(levelname)s %(name)s %(message)s", timestamp="time",
                         rename_fields={"levelname": "level", "name": "logger"}, json_ensure_ascii=False)


def configure_logging(levels: dict[str, int], fmt: str = "text", file: str | None = None,
                      max_bytes: int = 0, backups: int = 0, stream: IO[str] | None = None) -> None:
    """Replace the process's logging set-up: records go to ``file`` (rotated at ``max_bytes``,
    ``backups`` old files kept; 0 never rotates) when given, else to ``stream`` (stderr)."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"unknown log format '{fmt}'; known: {', '.join(LOG_FORMATS)}")
    # Any: logging.config.dictConfig's schema, of mixed values.
    formatter: dict[str, Any] = ({"()": json_formatter} if fmt == "json" else {"format": TEXT_FORMAT})
    if file:
        os.makedirs(os.path.dirname(os.path.abspath(file)), exist_ok=True)
        handler: dict[str, Any] = {"class": "logging.handlers.RotatingFileHandler", "filename": file,
                                   "maxBytes": max_bytes, "backupCount": backups, "encoding": "utf-8"}
    else:
        handler = {"class": "logging.StreamHandler", "stream": stream or sys.stderr}
    logging.config.dictConfig({
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"main": formatter},
        "handlers": {"main": {**handler, "formatter": "main"}},
        "root": {"level": levels.get(ROOT, logging.INFO), "handlers": ["main"]},
        "loggers": {name: {"level": level} for name, level in levels.items() if name != ROOT},
    })


def cause(e: BaseException) -> str:
    """An exception as a log line's reason: its message, or its repr when the message is
    empty (kazoo's ConnectionLoss(), a bare TimeoutError())."""
    return str(e) or repr(e)


class RateLimitFilter(logging.Filter):
    """Lets the first ``burst`` records of a kind through per ``interval_s`` and holds back
    the rest; the next record of that kind after the interval is preceded by one line saying
    how many were held back. A kind is the record's ``kind`` extra field, else its message
    template (so every peer's "closing %s: ..." is one kind). Records below ``level`` pass.

    Attach it to a logger (``logger.addFilter``), not a handler: the summary line is handed
    to the record's logger."""

    _SUMMARY = "rate_limit_summary"

    def __init__(self, interval_s: float = 10.0, burst: int = 1, level: int = logging.WARNING,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.burst = burst
        self.level = level
        self.clock = clock
        # -> (start, let through, held back, the last held back's message)
        self._windows: dict[tuple[str, object], tuple[float, int, int, str]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level or record.__dict__.get(self._SUMMARY):
            return True
        named = record.__dict__.get("kind")
        key = (record.name, named or record.msg)
        now = self.clock()
        start, passed, held, last = self._windows.get(key, (now, 0, 0, ""))
        if now - start >= self.interval_s:
            if held:
                self._summarise(record, named, held, now - start, last)
            start, passed, held, last = now, 0, 0, ""
        let_through = passed < self.burst
        self._windows[key] = (start, passed + 1, held, last) if let_through else \
            (start, passed, held + 1, record.getMessage())
        return let_through

    def _summarise(self, record: logging.LogRecord, named: object, held: int, span_s: float, last: str) -> None:
        # The last one held back, formatted: the kind's template alone would show its %s.
        what = f"{named} message(s)" if named else "message(s) like it"
        summary = logging.LogRecord(record.name, record.levelno, record.pathname, record.lineno,
                                    "%d more %s were not logged in the last %.0f s; the last: %s",
                                    (held, what, span_s, last), None)
        summary.__dict__[self._SUMMARY] = True
        logging.getLogger(record.name).handle(summary)
