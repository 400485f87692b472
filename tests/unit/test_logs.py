"""Logging set-up: level specs, JSON lines, the rotating file, and the rate-limit filter."""

from __future__ import annotations

import io
import json
import logging

import pytest

from rivulet.common.logs import RateLimitFilter, configure_logging, json_formatter, parse_levels

pytestmark = pytest.mark.fast


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    yield
    for h in root.handlers:
        if h not in saved[0]:
            h.close()
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def test_a_plain_level_is_the_root_level_and_logger_items_set_their_own():
    assert parse_levels([]) == {"": logging.INFO}
    assert parse_levels(["warning"]) == {"": logging.WARNING}
    assert parse_levels(["rivulet.coordinator=debug"]) == {"": logging.INFO, "rivulet.coordinator": logging.DEBUG}
    assert parse_levels(["error,rivulet.server.requests=DEBUG", " kazoo = warn ", "rivulet.server=info"]) == {
        "": logging.ERROR, "rivulet.server.requests": logging.DEBUG, "kazoo": logging.WARNING,
        "rivulet.server": logging.INFO}
    assert parse_levels(["debug", "info"]) == {"": logging.INFO}  # the last one wins
    assert parse_levels(["off"])[""] > logging.CRITICAL


@pytest.mark.parametrize("bad", ["verbose", "rivulet=loud", "=debug", "rivulet.server="])
def test_bad_level_specs_are_refused(bad):
    with pytest.raises(ValueError):
        parse_levels([bad])


def test_json_lines_carry_time_level_logger_message_and_extra_fields():
    record = logging.LogRecord("rivulet.server.requests", logging.INFO, __file__, 1, "slow %s v%d",
                               ("Produce", 9), None)
    record.__dict__.update({"api": "Produce", "total_ms": 12.5})
    line = json_formatter().format(record)
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["level"] == "INFO" and doc["logger"] == "rivulet.server.requests"
    assert doc["message"] == "slow Produce v9"
    assert doc["api"] == "Produce" and doc["total_ms"] == 12.5
    assert doc["time"].endswith("+00:00")


def test_json_lines_hold_the_traceback_in_one_line():
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        import sys
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    doc = json.loads(json_formatter().format(record))
    assert "RuntimeError: boom" in doc["exc_info"]


def test_configure_logging_sets_levels_per_logger(restore_logging):
    out = io.StringIO()
    configure_logging(parse_levels(["warning,test.logs.chatty=debug"]), "json", stream=out)
    logging.getLogger("test.logs.quiet").info("hidden")
    logging.getLogger("test.logs.chatty.child").debug("shown %d", 1)
    logging.getLogger("test.logs.quiet").warning("shown %d", 2)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(d["logger"], d["message"]) for d in lines] == [("test.logs.chatty.child", "shown 1"),
                                                            ("test.logs.quiet", "shown 2")]
    logging.getLogger("test.logs.chatty").setLevel(logging.NOTSET)


def test_configure_logging_rotates_its_file(tmp_path, restore_logging):
    path = tmp_path / "logs" / "broker.log"
    configure_logging({"": logging.INFO}, "text", str(path), max_bytes=400, backups=2)
    for i in range(40):
        logging.getLogger("test.logs.rotate").info("line %d of the rotation test", i)
    names = sorted(p.name for p in path.parent.iterdir())
    assert names == ["broker.log", "broker.log.1", "broker.log.2"]
    assert "line 39 of the rotation test" in path.read_text()


def test_unknown_format_is_refused():
    with pytest.raises(ValueError):
        configure_logging({"": logging.INFO}, "xml")


def test_rate_limit_filter_counts_what_it_holds_back(caplog):
    now = [0.0]
    logger = logging.getLogger("test.logs.limited")
    limited = RateLimitFilter(interval_s=10, burst=2, clock=lambda: now[0])
    logger.addFilter(limited)
    try:
        with caplog.at_level(logging.WARNING, logger="test.logs.limited"):
            for i in range(50):
                logger.warning("bad frame %d", i, extra={"kind": "bad frame"})
            logger.warning("other kind")
            logger.info("below the level: never held back")
            now[0] = 11.0
            logger.warning("bad frame again", extra={"kind": "bad frame"})
    finally:
        logger.removeFilter(limited)
    assert [r.getMessage() for r in caplog.records] == [
        "bad frame 0", "bad frame 1", "other kind",
        "48 more bad frame message(s) were not logged in the last 11 s; the last: bad frame 49", "bad frame again"]


def test_rate_limit_filter_lets_the_first_of_each_template_through_by_default(caplog):
    now = [0.0]
    logger = logging.getLogger("test.logs.templates")
    limited = RateLimitFilter(interval_s=10, clock=lambda: now[0])
    logger.addFilter(limited)
    try:
        with caplog.at_level(logging.WARNING, logger="test.logs.templates"):
            for port in range(5):
                logger.warning("closing %s: malformed", ("10.0.0.1", port))
                logger.warning("refusing a connection from %s", ("10.0.0.2", port))
            now[0] = 30.0
            logger.warning("closing %s: malformed", ("10.0.0.1", 99))
            logger.warning("closing %s: malformed", ("10.0.0.1", 100))
    finally:
        logger.removeFilter(limited)
    assert [r.getMessage() for r in caplog.records] == [
        "closing ('10.0.0.1', 0): malformed", "refusing a connection from ('10.0.0.2', 0)",
        "4 more message(s) like it were not logged in the last 30 s; the last: closing ('10.0.0.1', 4): malformed",
        "closing ('10.0.0.1', 99): malformed"]
