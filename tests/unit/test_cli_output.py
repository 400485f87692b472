"""The CLI's output: Kafka's plain tables stay as they are, rich only on a terminal, JSON for
scripts, and progress only on a terminal's stderr."""

from __future__ import annotations

import io
import json

import pytest

from rivulet.cli.output import Column, plain_table, print_table, progress

pytestmark = pytest.mark.fast

COLUMNS = [Column("TOPIC", "topic"), Column("PARTITION", "partition"), Column("LAG", "lag")]
ROWS = [["orders", 0, 5], ["orders-long-name", 11, None]]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


@pytest.fixture
def streams(monkeypatch):
    def use(stdout: io.StringIO, stderr: io.StringIO) -> tuple[io.StringIO, io.StringIO]:
        monkeypatch.setattr("sys.stdout", stdout)
        monkeypatch.setattr("sys.stderr", stderr)
        return stdout, stderr
    return use


def test_plain_table_is_kafkas_layout():
    assert plain_table([["A", "LONGER"], ["xyz", 1], ["q", ""]]) == "A   LONGER\nxyz 1\nq"


def test_kafka_tables_stay_plain_even_on_a_terminal(streams):
    out, _ = streams(Terminal(), Pipe())
    print_table(COLUMNS, ROWS, kafka=True)
    assert out.getvalue() == ("TOPIC            PARTITION LAG\n"
                              "orders           0         5\n"
                              "orders-long-name 11        -\n")


def test_other_tables_are_plain_when_piped_and_rich_on_a_terminal(streams):
    out, _ = streams(Pipe(), Pipe())
    print_table(COLUMNS, ROWS)
    assert out.getvalue() == plain_table([["TOPIC", "PARTITION", "LAG"], ["orders", 0, 5],
                                          ["orders-long-name", 11, "-"]]) + "\n"
    out, _ = streams(Terminal(), Pipe())
    print_table(COLUMNS, ROWS)
    shown = out.getvalue()
    assert shown != plain_table([["TOPIC", "PARTITION", "LAG"], *ROWS]) + "\n"
    for cell in ("TOPIC", "PARTITION", "orders-long-name", "11", "-"):
        assert cell in shown


def test_json_rows_are_objects_keyed_by_column(streams):
    out, _ = streams(Terminal(), Pipe())
    print_table(COLUMNS, ROWS, "json")
    assert json.loads(out.getvalue()) == [{"topic": "orders", "partition": 0, "lag": 5},
                                          {"topic": "orders-long-name", "partition": 11, "lag": None}]


def test_progress_is_silent_unless_stderr_is_a_terminal(streams):
    out, err = streams(Terminal(), Pipe())
    with progress("working", 10, "items") as bar:
        for i in range(10):
            bar.completed(i + 1)
        bar.advance()
    assert out.getvalue() == "" and err.getvalue() == ""


def test_progress_goes_to_stderr_never_stdout(streams):
    out, err = streams(Pipe(), Terminal())
    with progress("working", 3, "items") as bar:
        bar.advance(3)
        bar.update("still working")
    assert out.getvalue() == ""
    assert "working" in err.getvalue()


def test_progress_can_be_turned_off(streams):
    out, err = streams(Terminal(), Terminal())
    with progress("working", 3, enabled=False) as bar:
        bar.advance(3)
    assert out.getvalue() == "" and err.getvalue() == ""
