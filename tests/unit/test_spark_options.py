"""The Spark connector's option checks and the pipeline's end-of-run summary (pure logic)."""

from __future__ import annotations

import logging

import pytest

from rivulet.cli.pipeline import describe_end, open_windows

pytestmark = pytest.mark.fast


def test_kafka_options_are_checked_as_spark_checks_them(caplog):
    pytest.importorskip("pyspark")
    from rivulet.spark._options import CONSUMER_REFUSED, PRODUCER_REFUSED, SOURCE_KAFKA_OPTIONS, check_kafka_options
    check = lambda o, refused=CONSUMER_REFUSED: check_kafka_options(o, refused, SOURCE_KAFKA_OPTIONS, "source")  # noqa: E731
    for name in CONSUMER_REFUSED:
        with pytest.raises(ValueError, match=f"Kafka option '{name}' is not supported"):
            check({f"kafka.{name}": "x"})
    with pytest.raises(ValueError, match="'value.serializer' is not supported"):
        check({"kafka.value.serializer": "x"}, PRODUCER_REFUSED)
    # TLS options are the client's: checked by building the context, an unknown name refused.
    check({"kafka.security.protocol": "ssl"})
    with pytest.raises(ValueError, match="ssl.keystore.location=/k cannot be read"):
        check({"kafka.security.protocol": "SSL", "kafka.ssl.keystore.location": "/k"})
    with pytest.raises(ValueError, match='No such configuration property: "ssl.ca.locaton"'):
        check({"kafka.security.protocol": "SSL", "kafka.ssl.ca.locaton": "/k"})
    sasl = {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-512"}
    for bad, said in (({"kafka.sasl.mechanism": "PLAIN"}, "sasl.mechanism set, but security.protocol is PLAINTEXT"),
                      ({**sasl, "kafka.sasl.kerberos.service.name": "k"}, "not a SASL option Rivulet's source knows"),
                      (sasl, "SCRAM-SHA-512 needs sasl.username and sasl.password"),
                      ({**sasl, "kafka.sasl.mechanism": "GSSAPI"}, "GSSAPI is not supported")):
        with pytest.raises(ValueError, match=said):
            check(bad)
    check({**sasl, "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                             'username="u" password="p";'})
    with caplog.at_level(logging.WARNING, "rivulet.spark"):
        check({"kafka.security.protocol": "plaintext", "kafka.group.id": "g", "subscribe": "t",
               "whatever": "1", "kafka.linger.ms": "5"})
    assert [r.getMessage() for r in caplog.records] == ["option kafka.linger.ms has no effect on Rivulet's source"]


def test_options_neither_spark_nor_rivulet_knows_are_named(caplog):
    pytest.importorskip("pyspark")
    from rivulet.spark.sink import SinkOptions
    from rivulet.spark.source import SourceOptions
    with caplog.at_level(logging.WARNING, "rivulet.spark"):
        SourceOptions.parse({"kafka.bootstrap.servers": "b:9092", "subscrib": "t", "assign": '{"t": [0]}',
                             "startingOffsets": "earliest", "fetchOffset.numRetries": "3", "commitOffsets": "true",
                             "startingOfsets": "earliest", "_mockSystemTime": "1"}, streaming=True)
    assert [r.getMessage() for r in caplog.records] == [
        f"option {name} is not an option of Rivulet's source or of Spark's Kafka source: it has no effect"
        for name in ("subscrib", "startingOfsets")]
    caplog.clear()
    with caplog.at_level(logging.WARNING, "rivulet.spark"):
        SinkOptions.parse({"kafka.bootstrap.servers": "b:9092", "topic": "t", "checkpointLocation": "/cp",
                           "idempotencyKey": "k", "topik": "t", "subscribe": "t"})
    assert [r.getMessage() for r in caplog.records] == [
        f"option {name} is not an option of Rivulet's sink or of Spark's Kafka sink: it has no effect"
        for name in ("topik", "subscribe")]


def test_end_of_run_counts_the_windows_still_open():
    progress = {"eventTime": {"watermark": "2026-01-01T00:00:29.990Z"},
                "stateOperators": [{"numRowsTotal": 4}]}
    assert open_windows(progress) == (4, "2026-01-01T00:00:29.990Z")
    assert open_windows(None) == (0, None)
    assert describe_end(3, 4, {"stateOperators": [{"numRowsTotal": 0}]}) == "stopped after 3 batches; 4 windows written"
    assert describe_end(3, 0, progress).startswith("stopped after 3 batches; 0 windows written; 4 windows still open")


def test_markers_are_released_only_when_no_batch_can_be_replayed(tmp_path):
    from rivulet.cli.pipeline import nothing_to_replay
    assert nothing_to_replay(str(tmp_path))  # a query that never ran
    for n in range(3):
        (tmp_path / "offsets").mkdir(exist_ok=True)
        (tmp_path / "offsets" / str(n)).write_text("")
    (tmp_path / "commits").mkdir()
    for n in range(2):
        (tmp_path / "commits" / str(n)).write_text("")
    (tmp_path / "commits" / ".2.crc").write_text("")
    assert not nothing_to_replay(str(tmp_path))  # batch 2 was planned, not done: a restart replays it
    (tmp_path / "commits" / "2").write_text("")
    assert nothing_to_replay(str(tmp_path))


def test_pipeline_source_and_sink_format_is_rivulet_or_spark_kafka():
    from rivulet.cli.pipeline import PipelineConfig
    from rivulet.common.config import ConfigError
    doc = {"source": {"topic": "in"}, "events": {"schema": "t TIMESTAMP"},
           "output": {"topic": {"topic": "out"}}, "checkpoint": {"location": "cp"}}
    cfg = PipelineConfig.from_dict(doc)
    assert (cfg.source_format, cfg.output_format) == ("rivulet", "rivulet")
    cfg = PipelineConfig.from_dict({**doc, "source": {"topic": "in", "format": "kafka"},
                                    "output": {"topic": {"topic": "out", "format": "kafka"}}})
    assert (cfg.source_format, cfg.output_format) == ("kafka", "kafka")
    with pytest.raises(ConfigError, match=r"\[source\] format must be one of \['kafka', 'rivulet'\], got 'kafka-0-10'"):
        PipelineConfig.from_dict({**doc, "source": {"topic": "in", "format": "kafka-0-10"}})


def test_value_format_options():
    pytest.importorskip("pyspark")
    from rivulet.spark.source import SourceOptions
    base = {"kafka.bootstrap.servers": "b:9092", "subscribe": "orders"}
    vf = SourceOptions.parse({**base, "valueFormat": "Avro", "schema.registry.url": "http://r:8081"},
                             streaming=False).value_format
    assert vf is not None and (vf.fmt, vf.subject, vf.permissive) == ("avro", "orders-value", False)
    assert SourceOptions.parse(base, streaming=False).value_format is None
    for extra, said in (({"valueFormat": "thrift", "schema.registry.url": "u"}, "valueFormat must be one of"),
                        ({"valueFormat": "avro"}, "needs the option schema.registry.url"),
                        ({"schema.registry.url": "u"}, "needs valueFormat"),
                        ({"valueFormat": "avro", "schema.registry.url": "u", "mode": "DROP"}, "FAILFAST or PERMISSIVE"),
                        ({"valueFormat": "avro", "schema.registry.url": "u", "subscribe": "a,b"},
                         "valueSubject must be set")):
        with pytest.raises(ValueError, match=said):
            SourceOptions.parse({**base, **extra}, streaming=False)


def test_value_format_failfast_names_the_record_and_permissive_keeps_it():
    pytest.importorskip("pyspark")
    import pyarrow as pa

    from rivulet.registry.client import RegisteredSchema
    from rivulet.spark._values import ValueDecodeError, ValueFormat, decode_batch
    reader = RegisteredSchema(1, "AVRO", '"string"')
    batch = pa.RecordBatch.from_pydict({"key": pa.array([None, None], pa.binary()),
                                        "value": pa.array([b"\x00\x00\x00\x00\x01\x04ab", b"junk"]),
                                        "topic": ["t", "t"], "partition": pa.array([3, 3], pa.int32()),
                                        "offset": pa.array([7, 8], pa.int64())})
    vf = ValueFormat("avro", "http://127.0.0.1:9", "t-value", reader=reader)  # id 1 needs no look-up
    with pytest.raises(ValueDecodeError, match="t-3 offset 8: cannot decode the value \\(bad-magic\\)"):
        decode_batch(vf, batch)
    out = decode_batch(ValueFormat("avro", "http://127.0.0.1:9", "t-value", permissive=True, reader=reader), batch)
    assert out.column("value").to_pylist() == ["ab", None]
    assert out.column("rawValue").to_pylist() == [None, b"junk"]
    assert out.column("valueError").to_pylist()[0] is None


def test_pipeline_real_time_trigger_takes_spark_kafka_connector_and_the_topic_only():
    from rivulet.cli.pipeline import PipelineConfig
    from rivulet.common.config import ConfigError
    kafka = {"source": {"topic": "in", "format": "kafka"}, "events": {"schema": "t TIMESTAMP"},
             "output": {"topic": {"topic": "out", "format": "kafka"}}, "checkpoint": {"location": "cp"},
             "trigger": {"real_time": "5 minutes"}}
    assert PipelineConfig.from_dict(kafka).real_time == "5 minutes"
    with pytest.raises(ConfigError, match="Real-time Mode takes only its own Kafka connector"):
        PipelineConfig.from_dict({**kafka, "source": {"topic": "in"}})
    with pytest.raises(ConfigError, match="remove \\[output.parquet\\]"):
        PipelineConfig.from_dict({**kafka, "output": {"topic": {"topic": "out", "format": "kafka"},
                                                      "parquet": {"path": "pq"}}})
    with pytest.raises(ConfigError, match="exclude each other"):
        PipelineConfig.from_dict({**kafka, "trigger": {"real_time": "5 minutes", "available_now": True}})
    # Spark's default trigger: each micro-batch as soon as the last one is done
    assert PipelineConfig.from_dict({**kafka, "trigger": {"processing_time": ""}}).trigger_interval == ""
    assert PipelineConfig.load("examples/pipeline.toml").real_time is None


def test_read_on_driver_picks_pysparks_simple_stream_reader_for_streaming_only():
    pytest.importorskip("pyspark")
    from pyspark.sql.datasource_internal import _SimpleStreamReaderWrapper, _streamReader
    from rivulet.spark import SCHEMA_NO_HEADERS, RivuletDataSource
    from rivulet.spark.source import RivuletDriverStreamReader, RivuletStreamReader, SourceOptions
    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t", "maxOffsetsPerTrigger": "100"}
    plain = _streamReader(RivuletDataSource(base), SCHEMA_NO_HEADERS)
    assert isinstance(plain, RivuletStreamReader)
    wrapped = _streamReader(RivuletDataSource({**base, "readOnDriver": "true"}), SCHEMA_NO_HEADERS)
    assert isinstance(wrapped, _SimpleStreamReaderWrapper)
    assert isinstance(wrapped.simple_reader, RivuletDriverStreamReader)
    assert wrapped.simple_reader.opts.max_offsets_per_trigger == 100  # applied inside read()
    with pytest.raises(ValueError, match="readOnDriver is only for streaming queries"):
        SourceOptions.parse({**base, "readOnDriver": "true"}, streaming=False)
    with pytest.raises(ValueError, match="readOnDriver must be true or false"):
        SourceOptions.parse({**base, "readOnDriver": "maybe"}, streaming=True)
