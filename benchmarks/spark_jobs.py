"""The Spark jobs and stages of each micro-batch of a streaming query, from Spark's event log.

    python -m benchmarks.pipeline_latency ... --event-log /tmp/ev    # writes the log
    python -m benchmarks.spark_jobs /tmp/ev/local-*                  # per query: jobs per batch

PySpark has no SparkListener and the pipeline's session runs without the UI, so the event log
(``spark.eventLog.enabled``) is read after the run. A job belongs to the micro-batch named by its
``streaming.sql.batchId`` property (the query by ``sql.streaming.queryId``); per micro-batch the
report gives each job's wall time, its stages (skipped ones left out), their task counts and the
tasks' executor run time, and per query the median over its micro-batches.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator


@dataclass
class Stage:
    stage_id: int
    name: str = ""
    tasks: int = 0
    ms: int = 0  # submission to completion
    run_ms: int = 0  # the tasks' executor run time, summed
    ran: bool = False


@dataclass
class Job:
    job_id: int
    query: str
    batch: int
    description: str
    start_ms: int
    end_ms: int = 0
    stage_ids: list[int] = field(default_factory=list)

    @property
    def ms(self) -> int:
        return self.end_ms - self.start_ms


def log_lines(path: Path) -> Iterator[str]:
    """A log's lines; Spark 4 compresses it with zstd by default (``spark.eventLog.compress``)."""
    if path.suffix != ".zstd":
        yield from path.open()
        return
    import zstandard
    with path.open("rb") as f, zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True) as z:
        try:
            yield from io.TextIOWrapper(z, encoding="utf-8")
        except zstandard.ZstdError:  # the log of a running application ends mid-frame
            return


@dataclass
class Execution:
    """A SQL execution of a micro-batch: the batch's own (the root, ``addBatch``'s) or one the
    foreachBatch function ran inside it (toArrow, count, a write)."""

    exec_id: int
    root_id: int
    start_ms: int
    end_ms: int = 0


def read_log(path: Path) -> tuple[list[Job], dict[int, Stage], dict[str, str],
                                  dict[tuple[str, int], list[Execution]], dict[tuple[str, int], dict[str, int]]]:
    """The streaming jobs, every stage, each query id's name, the SQL executions per (query
    name, batch) and each batch's durationMs."""
    jobs: dict[int, Job] = {}
    stages: dict[int, Stage] = {}
    names: dict[str, str] = {}
    execs: dict[int, Execution] = {}
    exec_batch: dict[tuple[str, int], list[Execution]] = defaultdict(list)
    durations: dict[tuple[str, int], dict[str, int]] = {}
    for line in log_lines(path):
        ev = json.loads(line)
        kind = ev["Event"]
        if kind.endswith("SparkListenerSQLExecutionStart"):
            found = re.match(r"(.*)\nid = .*\nbatch = (\d+)", ev.get("description") or "", re.S)
            if found:
                e = execs[ev["executionId"]] = Execution(ev["executionId"], ev["rootExecutionId"], ev["time"])
                exec_batch[(found.group(1), int(found.group(2)))].append(e)
        elif kind.endswith("SparkListenerSQLExecutionEnd") and ev["executionId"] in execs:
            execs[ev["executionId"]].end_ms = ev["time"]
        elif kind.endswith("QueryProgressEvent"):
            pr = ev["progress"]
            durations[(pr["name"], pr["batchId"])] = pr["durationMs"]
        elif kind == "SparkListenerJobStart":
            props = ev.get("Properties") or {}
            query = props.get("sql.streaming.queryId")
            if query is None or "streaming.sql.batchId" not in props:
                continue
            desc = props.get("spark.job.description") or props.get("callSite.short", "")
            jobs[ev["Job ID"]] = Job(ev["Job ID"], query, int(props["streaming.sql.batchId"]),
                                     desc.splitlines()[0] if desc else "", ev["Submission Time"],
                                     stage_ids=list(ev["Stage IDs"]))
            for info in ev["Stage Infos"]:
                stages.setdefault(info["Stage ID"], Stage(info["Stage ID"], info["Stage Name"],
                                                          info["Number of Tasks"]))
        elif kind == "SparkListenerJobEnd" and ev["Job ID"] in jobs:
            jobs[ev["Job ID"]].end_ms = ev["Completion Time"]
        elif kind == "SparkListenerStageCompleted":
            info = ev["Stage Info"]
            st = stages.setdefault(info["Stage ID"], Stage(info["Stage ID"]))
            st.name, st.tasks, st.ran = info["Stage Name"], info["Number of Tasks"], True
            st.ms = info.get("Completion Time", 0) - info.get("Submission Time", 0)
        elif kind == "SparkListenerTaskEnd":
            st = stages.setdefault(ev["Stage ID"], Stage(ev["Stage ID"]))
            st.run_ms += (ev.get("Task Metrics") or {}).get("Executor Run Time", 0)
        elif kind.endswith("QueryStartedEvent"):
            names[ev["id"]] = ev.get("name") or ev["id"]
    return sorted(jobs.values(), key=lambda j: j.job_id), stages, names, exec_batch, durations


def stage_label(st: Stage) -> str:
    return f"{st.name.split(' at ')[0]}: {st.tasks} tasks, {st.ms} ms, run {st.run_ms} ms"


def report(path: Path, verbose: int) -> None:
    jobs, stages, names, execs, durations = read_log(path)
    by_batch: dict[str, dict[int, list[Job]]] = defaultdict(lambda: defaultdict(list))
    for j in jobs:
        by_batch[j.query][j.batch].append(j)
    for query, batches in by_batch.items():
        print(f"\n{names.get(query, query)}: {len(batches)} micro-batches")
        shape: dict[tuple, int] = defaultdict(int)
        per_batch_ms: list[int] = []
        per_job: dict[tuple[int, str], list[int]] = defaultdict(list)
        per_stage: dict[tuple[int, int], list[tuple[int, int, int]]] = defaultdict(list)
        split: dict[str, list[int]] = defaultdict(list)
        name = names.get(query, query)
        for batch, bjobs in sorted(batches.items()):
            d = durations.get((name, batch), {})
            ex = execs.get((name, batch), [])
            root = [e for e in ex if e.exec_id == e.root_id]
            inner = [e for e in ex if e.exec_id != e.root_id]
            jobs_ms = sum(j.ms for j in bjobs)
            if d and root:
                split["addBatch"].append(d.get("addBatch", 0))
                split["triggerExecution"].append(d.get("triggerExecution", 0))
                split["the batch's root SQL execution"].append(root[0].end_ms - root[0].start_ms)
                split["SQL executions inside it (foreachBatch's)"].append(sum(e.end_ms - e.start_ms for e in inner))
                split["Spark jobs"].append(jobs_ms)
                split["inner executions outside their jobs"].append(
                    sum(e.end_ms - e.start_ms for e in inner) - jobs_ms)
            ran = [[stages[s] for s in j.stage_ids if stages[s].ran] for j in bjobs]
            shape[tuple((len(r), tuple(s.tasks for s in r)) for r in ran)] += 1
            per_batch_ms.append(sum(j.ms for j in bjobs))
            for i, (j, r) in enumerate(zip(bjobs, ran, strict=True)):
                per_job[(i, j.description)].append(j.ms)
                for k, s in enumerate(r):
                    per_stage[(i, k)].append((s.ms, s.run_ms, s.tasks))
            if verbose:
                print(f"  batch {batch}: " + "; ".join(
                    f"job {j.job_id} {j.ms} ms [{', '.join(stage_label(s) for s in r)}]" for j, r in zip(bjobs, ran, strict=True)))
        print(f"  Spark jobs' wall time per micro-batch, median {statistics.median(per_batch_ms):.0f} ms")
        for k, xs in split.items():
            print(f"  {k}: median {statistics.median(xs):.0f} ms")
        for s, n in sorted(shape.items(), key=lambda kv: -kv[1]):
            print(f"  {n} micro-batches with {len(s)} jobs, stages run (tasks each): "
                  + " | ".join(" + ".join(str(t) for t in tasks) for _, tasks in s))
        for (i, desc), ms in sorted(per_job.items()):
            print(f"  job {i + 1} ({desc[:60]}): {len(ms)} times, median {statistics.median(ms):.0f} ms")
            for (ji, k), xs in sorted(per_stage.items()):
                if ji == i:
                    print(f"    stage {k + 1}: {len(xs)} times, median {statistics.median(x[0] for x in xs):.0f} ms, "
                          f"tasks' run time {statistics.median(x[1] for x in xs):.0f} ms, "
                          f"{statistics.median(x[2] for x in xs):.0f} tasks")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+", type=Path, help="Spark event log files")
    ap.add_argument("-v", "--verbose", action="count", default=0, help="every micro-batch's jobs")
    args = ap.parse_args()
    for p in args.logs:
        report(p, args.verbose)


if __name__ == "__main__":
    main()
