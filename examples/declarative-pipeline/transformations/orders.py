"""Orders from a Rivulet topic, windowed per category under a watermark, into a streaming table
(Parquet) and, through the rivulet sink, into a topic: the `rivulet pipeline` demo's job,
declared. `spark` is the pipeline's session (spark-pipelines provides it)."""

from pyspark import pipelines as dp
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

SCHEMA = ("order_id STRING, customer_id STRING, product STRING, category STRING, quantity INT, price DOUBLE, "
          "currency STRING, event_time TIMESTAMP")
conf = spark.conf  # noqa: F821
BOOTSTRAP = conf.get("rivulet.bootstrap.servers")
WINDOW_COLUMNS = ["window_start", "window_end", "category", "orders", "items", "revenue"]


def orders() -> DataFrame:
    """JSON orders from the input topic, parsed; lines that do not parse are dropped."""
    raw = (spark.readStream.format("rivulet")  # noqa: F821
           .option("kafka.bootstrap.servers", BOOTSTRAP).option("subscribe", conf.get("rivulet.input.topic"))
           .option("startingOffsets", "earliest").load())
    parsed = raw.select(F.from_json(F.col("value").cast("string"), SCHEMA,
                                    {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss[.SSS][XXX]"}).alias("e")).select("e.*")
    return parsed.where(F.col("event_time").isNotNull())


@dp.table(format="parquet", comment="closed 10-second windows per category")
def orders_by_window() -> DataFrame:
    w = F.window("event_time", "10 seconds")
    agg = (orders().withWatermark("event_time", "5 seconds")
           .groupBy(w.alias("window"), "category")
           .agg(F.count(F.lit(1)).alias("orders"), F.sum("quantity").alias("items"),
                F.round(F.sum(F.col("quantity") * F.col("price")), 2).alias("revenue")))
    return agg.select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                      *WINDOW_COLUMNS[2:])


# The same windows to a topic: a sink (format rivulet, written exactly once per batch by the
# transactional sink) fed by an append flow reading the table as a stream.
dp.create_sink("orders_by_window_topic", "rivulet",
               {"kafka.bootstrap.servers": BOOTSTRAP, "topic": conf.get("rivulet.output.topic")})


@dp.append_flow(target="orders_by_window_topic")
def windows_to_topic() -> DataFrame:
    windows = spark.readStream.table("orders_by_window")  # noqa: F821
    # Columns named: a query function may not analyze its DataFrame (df.columns would).
    value = F.to_json(F.struct(*WINDOW_COLUMNS))
    return windows.select(F.col("category").alias("key"), value.alias("value"))
