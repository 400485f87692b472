"""The record walk on one core, without a broker: parse, the produce check, the Spark decoder.

    python -m benchmarks.record_walk                      # C accelerator as built
    RIVULET_NO_SPEEDUPS=1 python -m benchmarks.record_walk  # the Python path

The batches are what a producer sends: 1,000 records of 100 B values and 8 B keys, without
headers, and again with two headers on one record in ten. Each workload runs --seconds and prints records per second; compare
trees by running it in each, alternated (docs/performance.md, "One record walker"). Rates
are per CPU second of this process, which a loaded machine disturbs less than wall time.
"""

from __future__ import annotations

import argparse
import os
import time

from rivulet.protocol import records
from rivulet.protocol.records import Record, decode_records, encode_batch, validate_produce_records

T0 = 1_700_000_000_000


def batches(n_batches: int, per_batch: int, size: int, headers_every: int) -> list[bytes]:
    value = bytes(i % 251 for i in range(size))
    out = []
    for b in range(n_batches):
        recs = [Record(0, T0 + i, b"%08d" % i, value,
                       [("trace", b"abc"), ("n", None)] if headers_every and i % headers_every == 0 else [])
                for i in range(per_batch)]
        out.append(encode_batch(recs, base_offset=b * per_batch, base_timestamp=T0))
    return out


def rate(fn, n: int, seconds: float) -> float:
    fn()
    done, t0 = 0, time.process_time()  # CPU time: the machine may be shared
    while (elapsed := time.process_time() - t0) < seconds or not done:
        fn()
        done += n
    return done / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--size", type=int, default=100)
    args = ap.parse_args()
    for headers_every in (0, 10):
        run(batches(20, 1000, args.size, headers_every), batches(200, 100, args.size, headers_every), args.seconds,
            "1/10 with headers" if headers_every else "")


def run(blobs: list[bytes], small: list[bytes], seconds: float, note: str) -> None:
    produced = [bytes(8) + b[8:] for b in blobs]  # a produced batch has baseOffset 0 (outside the CRC)
    fetch = b"".join(blobs)
    n = 20 * 1000

    def parse() -> None:
        for _ in decode_records(fetch):
            pass

    def check() -> None:
        for b in produced:
            validate_produce_records(b, max_batch_size=1 << 30, require_keys=True,
                                     timestamp_bounds=(T0 - 10**9, T0 + 10**9))

    rows = [("parse (decode_records)", parse), ("produce check (validate_produce_records)", check)]
    try:
        from rivulet.arrow import records as spark
    except ImportError:
        spark = None
    if spark is not None:
        view = memoryview(fetch)

        def decode(small: bool) -> None:
            saved = spark.VECTOR_MIN_RECORDS, getattr(spark, "LAYOUT_MIN_RECORDS", 0)
            if small:  # the per-record loop, which a chunk the vectorized paths refuse takes
                spark.VECTOR_MIN_RECORDS = spark.LAYOUT_MIN_RECORDS = 1 << 40
            try:
                chunk = spark.Chunk(True, over=view)
                spark.decode_into(chunk, view, 0, n, False, None)
                assert chunk.to_arrow("t", 0).num_rows == n
            finally:
                spark.VECTOR_MIN_RECORDS, spark.LAYOUT_MIN_RECORDS = saved

        def decode_small() -> None:  # a streaming source's small fetches: 100 records each
            for b in small:
                chunk = spark.Chunk(True)
                spark.decode_into(chunk, b, 0, n, False, None)
                assert chunk.to_arrow("t", 0).num_rows == 100

        rows.append(("Spark decode to Arrow (vectorized)", lambda: decode(False)))
        rows.append(("Spark decode to Arrow (100-record chunks)", decode_small))
        rows.append(("Spark decode to Arrow (per-record loop)", lambda: decode(True)))
    c = "C" if records.SPEEDUPS else "Python"
    for name, fn in rows:
        print(f"{c:<6} | {name:<42} | {rate(fn, n, seconds):>12,.0f} records/CPU s | load {os.getloadavg()[0]:.2f} | {note}",
              flush=True)


if __name__ == "__main__":
    main()
