"""The demo's last check, without Spark: the pipeline's closed windows against the windows Spark
SQL recomputed from the orders table must agree in orders, items and revenue (to the cent)."""

from __future__ import annotations

from datetime import datetime

import pytest

from rivulet.cli.demo_table import compare_windows, verdict_line, windows_of

pytestmark = pytest.mark.fast

T0, T1 = datetime(2026, 1, 1, 12, 0, 0), datetime(2026, 1, 1, 12, 0, 10)
CLOSED = {(T0, "books"): (3, 5, 74.95), (T0, "toys"): (1, 2, 44.0), (T1, "books"): (2, 2, 29.98)}


def test_the_same_windows_agree():
    result = compare_windows(CLOSED, dict(CLOSED))
    assert result.agrees and result.closed == 3 and result.unclosed_orders == 0
    assert verdict_line(result) == "✓ Spark SQL over the table agrees with all 3 closed windows (orders, items, revenue)"


def test_a_window_with_another_count_or_items_differs():
    for changed in ((2, 5, 74.95), (3, 6, 74.95)):
        result = compare_windows(CLOSED, {**CLOSED, (T0, "books"): changed})
        assert not result.agrees
        assert result.differ == [((T0, "books"), (3, 5, 74.95), changed)]
        assert verdict_line(result).startswith("✗ Spark SQL over the table differs from 1 of 3 closed windows "
                                               "(first: books at 2026-01-01 12:00:00: pipeline (3, 5, 74.95), "
                                               f"table {changed})")


def test_revenue_agrees_to_the_cent():
    # Both sides round a sum of doubles added in their own order: the last bit may differ.
    assert compare_windows(CLOSED, {**CLOSED, (T1, "books"): (2, 2, 29.98 + 1e-9)}).agrees
    assert not compare_windows(CLOSED, {**CLOSED, (T1, "books"): (2, 2, 29.99)}).agrees


def test_a_closed_window_the_table_lacks_differs():
    recomputed = {k: v for k, v in CLOSED.items() if k != (T0, "toys")}
    result = compare_windows(CLOSED, recomputed)
    assert result.differ == [((T0, "toys"), (1, 2, 44.0), None)]


def test_windows_the_pipeline_has_not_closed_are_counted_not_failed():
    later = datetime(2026, 1, 1, 12, 0, 20)
    result = compare_windows(CLOSED, {**CLOSED, (later, "books"): (4, 4, 59.96), (later, "toys"): (1, 1, 22.0)})
    assert result.agrees and result.unclosed_orders == 5
    assert verdict_line(result).endswith("; 5 of its orders in windows not closed")


def test_no_closed_windows_is_no_agreement():
    result = compare_windows({}, dict(CLOSED))
    assert not result.agrees
    assert verdict_line(result) == "✗ no closed windows to compare the table with"


def test_windows_of_reads_rows_by_window():
    rows = [{"window_start": T0, "category": "books", "orders": 3, "items": 5, "revenue": 74.95}]
    assert windows_of(rows) == {(T0, "books"): (3, 5, 74.95)}
