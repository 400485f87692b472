"""The client's request framing must be byte-for-byte what the protocol codec produces."""

from __future__ import annotations

import pytest

from rivulet.client.connection import encode_request_parts
from rivulet.protocol import framing
from rivulet.protocol import records as rec
from rivulet.protocol.messages import api_versions_request as avq
from rivulet.protocol.messages import fetch_request as fq
from rivulet.protocol.messages import metadata_request as mq
from rivulet.protocol.messages import produce_request as prq

pytestmark = pytest.mark.fast


def produce(size: int) -> prq.ProduceRequest:
    batch = rec.encode_batch([rec.Record(0, 1, None, b"x" * size, [])])
    return prq.ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        prq.TopicProduceData(name="t", partition_data=[prq.PartitionProduceData(index=0, records=batch)])])


@pytest.mark.parametrize("req,versions", [
    (avq.ApiVersionsRequest(client_software_name="rivulet", client_software_version="0.1.0"), (0, 3)),
    (mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name="t")], allow_auto_topic_creation=False), (1, 9, 12)),
    (fq.FetchRequest(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                     session_id=0, session_epoch=-1, topics=[fq.FetchTopic(topic="t", partitions=[
                         fq.FetchPartition(partition=0, fetch_offset=5, partition_max_bytes=1 << 20)])],
                     forgotten_topics_data=[], rack_id=""), (4, 11, 12)),
    (produce(10), (3, 8, 9, 11)),
    (produce(100_000), (3, 9, 11)),  # a large batch stays out of line
])
@pytest.mark.parametrize("client_id", ["rivulet", None])
def test_parts_join_to_the_codec_frame(req, versions, client_id):
    for v in versions:
        parts = encode_request_parts(req, v, 42, None if client_id is None else client_id.encode())
        assert b"".join(bytes(p) for p in parts) == framing.encode_request(req, v, 42, client_id)


def test_large_records_are_not_copied():
    req = produce(100_000)
    parts = encode_request_parts(req, 11, 1, b"c")
    batch = req.topic_data[0].partition_data[0].records
    assert any(p is batch for p in parts)
