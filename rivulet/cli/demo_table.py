"""The demo's orders topic as an Iceberg table (docs/iceberg.md), and the demo's last check:
Spark SQL over the table's rows recomputes the pipeline's windows, which must agree.

No Iceberg Spark runtime runs on PySpark 4.3 (docs/spark.md), so the table is read with
pyiceberg into Arrow and handed to Spark as a temporary view named after it. The comparison
itself (``compare_windows``) is plain Python, on the windows both sides collected.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rivulet.iceberg.catalog import NAMESPACE, CatalogSettings

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import DataFrame, Row, SparkSession

# A short target lag: the table is committed to every 2.5 s while orders arrive, so it has
# caught up by the time the pipeline has (which takes longer: its settle time and last batch).
TARGET_LAG_MS = 5000
TABLE_WAIT_S = 60.0

# The pipeline's windows again, from the table's rows: the JSON values' fields it uses, with the
# pipeline's types, and orders, items and revenue per category per window (the end mark, an
# event with no order id, left out as the pipeline's recount does).
WINDOWS_SQL = """\
SELECT window(o.event_time, '{window}').start AS window_start, o.category,
       count(*) AS orders, sum(o.quantity) AS items, round(sum(o.quantity * o.price), 2) AS revenue
FROM (SELECT from_json(CAST(value AS STRING),
        'order_id STRING, category STRING, quantity INT, price DOUBLE, event_time TIMESTAMP') AS o
      FROM {view})
WHERE o.order_id IS NOT NULL
GROUP BY 1, 2"""

WindowKey = tuple[Any, str]  # (window start, category); Any: a Spark Row's timestamp as given
WindowValues = tuple[int, int, float]  # (orders, items, revenue)


def iceberg_installed() -> bool:
    """pyiceberg (the ``iceberg`` extra) is what the broker writes tables with and the demo
    reads them with."""
    return importlib.util.find_spec("pyiceberg") is not None


def topic_configs() -> dict[str, str]:
    return {"iceberg.mode": "key_value", "iceberg.target.lag.ms": str(TARGET_LAG_MS)}


@dataclass(slots=True)
class WindowsAgreement:
    """The pipeline's closed windows against the same windows recomputed from the table."""

    closed: int = 0
    # closed windows whose orders, items or revenue differ: key, the pipeline's, the table's
    differ: list[tuple[WindowKey, WindowValues, WindowValues | None]] = field(default_factory=list)
    # orders of the table in windows the pipeline has not written (not closed)
    unclosed_orders: int = 0

    @property
    def agrees(self) -> bool:
        return self.closed > 0 and not self.differ


def compare_windows(closed: Mapping[WindowKey, WindowValues],
                    recomputed: Mapping[WindowKey, WindowValues]) -> WindowsAgreement:
    """Every closed window must be in ``recomputed`` with the same orders and items, and the same
    revenue to the cent: both round a sum of doubles, added in an order of their own, so the
    last bit may differ. Windows only ``recomputed`` has are counted, as the other checks count
    orders outside the closed windows, not failed."""
    out = WindowsAgreement(closed=len(closed))
    for key, (orders, items, revenue) in closed.items():
        got = recomputed.get(key)
        if got is None or got[0] != orders or got[1] != items or abs(got[2] - revenue) >= 0.005:
            out.differ.append((key, (orders, items, revenue), got))
    out.unclosed_orders = sum(v[0] for k, v in recomputed.items() if k not in closed)
    return out


def windows_of(rows: Iterable[Row]) -> dict[WindowKey, WindowValues]:
    """Spark rows with window_start, category, orders, items and revenue, by window."""
    return {(r["window_start"], r["category"]): (int(r["orders"]), int(r["items"]), float(r["revenue"]))
            for r in rows}


def wait_for_table(catalog: Catalog, topic: str, ends: Mapping[int, int], timeout: float = TABLE_WAIT_S
                   ) -> dict[int, int]:
    """Wait until the table's next offsets reach ``ends`` (the topic's end offsets) in every
    partition, or ``timeout`` seconds; the offsets it had got to."""
    from rivulet.iceberg.table import read_state
    deadline = time.monotonic() + timeout
    while True:
        state = read_state(catalog, topic)
        got = dict(state.next_offsets) if state is not None else {}
        if all(got.get(p, 0) >= end for p, end in ends.items()) or time.monotonic() >= deadline:
            return got
        time.sleep(0.5)


@dataclass(frozen=True, slots=True)
class TableCheck:
    """The demo's last check: wait for the table to hold the topic's every record (its end
    offsets, ``ends``), read it with pyiceberg into a temporary view, recompute the windows in
    Spark SQL and compare them with the pipeline's closed windows."""

    data_dir: str  # the demo broker's log dir, where its SQLite catalog and warehouse are
    topic: str
    ends: Mapping[int, int]
    window: str  # as Spark's window() takes it: "10 seconds"

    def run(self, spark: SparkSession, closed: DataFrame) -> bool:
        """``closed``: the pipeline's windows (a DataFrame). Prints the check's line; True when
        the table holds every record and agrees with every closed window."""
        from rivulet.iceberg.catalog import open_catalog
        from rivulet.iceberg.table import table_identifier
        topic, name = self.topic, f"{NAMESPACE}.{self.topic}"
        catalog = open_catalog(CatalogSettings.resolve("", "", self.data_dir))
        got = wait_for_table(catalog, topic, self.ends)
        held, want = sum(min(got.get(p, 0), e) for p, e in self.ends.items()), sum(self.ends.values())
        if held < want:
            print(f"  ✗ the table {name} holds {held:,} of the topic's {want:,} records after {TABLE_WAIT_S:.0f} s "
                  "(its translation fell behind); its windows not compared", flush=True)
            return False
        rows = catalog.load_table(table_identifier(topic)).scan().to_arrow()
        spark.createDataFrame(rows).createOrReplaceTempView(topic)
        sql = WINDOWS_SQL.format(window=self.window, view=topic)
        print(f"\n  The topic is also the Iceberg table {name}: its {rows.num_rows:,} rows, read with pyiceberg into\n"
              f"  the Spark view `{topic}` (no Iceberg runtime for Spark 4.3 yet), and the windows again in Spark SQL:")
        print("\n".join("    " + line for line in sql.splitlines()))
        result = compare_windows(windows_of(closed.collect()), windows_of(spark.sql(sql).collect()))
        spark.catalog.dropTempView(topic)
        print("  " + verdict_line(result), flush=True)
        return result.agrees


def verdict_line(result: WindowsAgreement) -> str:
    extra = f"; {result.unclosed_orders:,} of its orders in windows not closed" if result.unclosed_orders else ""
    if result.agrees:
        return f"✓ Spark SQL over the table agrees with all {result.closed} closed windows (orders, items, revenue){extra}"
    if not result.differ:
        return "✗ no closed windows to compare the table with"
    (start, category), pipeline, table = result.differ[0]
    return (f"✗ Spark SQL over the table differs from {len(result.differ)} of {result.closed} closed windows "
            f"(first: {category} at {start}: pipeline {pipeline}, table {table}){extra}")
