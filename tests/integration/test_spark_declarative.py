"""The demo's pipeline as a Spark Declarative Pipeline (examples/declarative-pipeline), run
with PySpark's own ``spark-pipelines run --spec``: Rivulet's source feeds a windowed streaming
table (Parquet) and, through a sink of format rivulet, a topic; both hold exact counts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

pytest.importorskip("pyspark.pipelines", reason="Spark Declarative Pipelines need PySpark 4.1 or later")
pq = pytest.importorskip("pyarrow.parquet")
yaml = pytest.importorskip("yaml")
pytest.importorskip("grpc", reason="spark-pipelines is a Spark Connect client: pip install 'rivulet[spark-connect]'")

from test_spark import consume_all, create_topic, produce, topic_name  # noqa: E402
from test_spark_pipeline import BASE, order  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.spark]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "declarative-pipeline"


@pytest.mark.timeout(900)  # Spark JVMs and restarts: far slower on a busy machine
def test_demo_pipeline_runs_with_spark_pipelines(broker, tmp_path):
    from spark_cluster import spark_env, spark_home
    src = create_topic(broker.bootstrap, topic_name("sdp-orders"), 2)
    dst = create_topic(broker.bootstrap, topic_name("sdp-windows"), 1)
    cats = ["books", "garden", "toys"]
    expected: Counter = Counter()
    events = []
    for i in range(1500):
        second = i / 50.0  # 0 to 30 s
        events.append(order(i, second, cats[i % 3], 1))
        expected[(int(second) // 10 * 10, cats[i % 3])] += 1
    events.append(order(1500, 3600, "sentinel", 1))  # moves the watermark past every window above
    produce(broker.bootstrap, src, events + [{"value": b"not json"}])

    project = tmp_path / "pipeline"
    shutil.copytree(EXAMPLE, project)
    spec = yaml.safe_load((project / "spark-pipeline.yml").read_text())
    spec["storage"] = (tmp_path / "storage").as_uri()
    spec["configuration"].update({"rivulet.bootstrap.servers": broker.bootstrap, "rivulet.input.topic": src,
                                  "rivulet.output.topic": dst})
    (project / "spark-pipeline.yml").write_text(yaml.safe_dump(spec))

    def run() -> None:
        # cwd: the pipeline's tables go to ./spark-warehouse
        done = subprocess.run([os.path.join(spark_home(), "bin", "spark-pipelines"),
                               "--conf", "spark.sql.catalogImplementation=hive", "run", "--spec",
                               str(project / "spark-pipeline.yml")], cwd=tmp_path, env=spark_env(),
                              capture_output=True, text=True, timeout=400)
        assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]

    run()
    # A second run goes on from the checkpoints in the pipeline's storage: only the new events.
    events = []
    for i in range(600):
        second = 3600 + i / 50.0
        events.append(order(2000 + i, second, cats[i % 3], 1))
        expected[(int(second) // 10 * 10, cats[i % 3])] += 1
    expected[(3600, "sentinel")] += 1  # the first run's sentinel: its window closes now
    events.append(order(2600, 7200, "sentinel", 1))
    produce(broker.bootstrap, src, events)
    run()

    def key(r: dict) -> tuple[int, str]:
        s = r["window_start"]
        s = s if isinstance(s, datetime) else datetime.fromisoformat(s.replace("Z", "+00:00"))
        return int((s.replace(tzinfo=timezone.utc) - BASE).total_seconds()), r["category"]

    table = pq.ParquetDataset(str(tmp_path / "spark-warehouse" / "orders_by_window")).read().to_pylist()
    got = {key(r): r["orders"] for r in table}
    assert len(table) == len(got) and got == dict(expected)
    msgs = consume_all(broker.bootstrap, dst, 1)
    from_topic = {key(json.loads(m.value())): json.loads(m.value())["orders"] for m in msgs}
    assert len(msgs) == len(from_topic) and from_topic == dict(expected)
