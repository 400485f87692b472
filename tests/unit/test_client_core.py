"""The client core without sockets: requests it builds survive the wire at every version the
clients use, answers read into plain results, errors say what to do, backoff grows and jitters."""

from __future__ import annotations

import pytest

from rivulet.client import core
from rivulet.client.admin.client import NewTopic
from rivulet.common.types import TopicPartition as TP
from rivulet.protocol import framing
from rivulet.protocol.errors import ErrorCode, ApiError
from rivulet.protocol.messages import (
    add_partitions_to_txn_response as aptr,
    delete_records_response as drr,
    fetch_response as fr,
    find_coordinator_response as fcr,
    list_offsets_response as lor,
    metadata_response as mr,
    offset_commit_response as ocr,
    offset_fetch_response as ofr,
    offset_for_leader_epoch_response as oler,
    txn_offset_commit_response as tocr,
)

pytestmark = pytest.mark.fast


def wire(req, version=None):
    """The request as the broker decodes it, at ``version`` (default: the highest the clients send)."""
    lo, hi = req.VALID_VERSIONS
    v = min(hi, core.MAX_VERSIONS.get(req.API_KEY, hi)) if version is None else version
    frame = framing.encode_request(req, v, 7, "test")
    _, body = framing.decode_request(memoryview(frame)[4:])
    return body


# ---------------------------------------------------------------- backoff


def test_backoff_doubles_up_to_the_max_without_jitter():
    b = core.Backoff(100, 1000, jitter=0)
    assert [b.delay_ms(n) for n in range(6)] == [100, 200, 400, 800, 1000, 1000]


def test_backoff_jitter_spreads_by_twenty_percent():
    b = core.Backoff(100, 1000)
    assert b.delay_ms(1, lambda lo, hi: lo) == pytest.approx(160)
    assert b.delay_ms(1, lambda lo, hi: hi) == pytest.approx(240)
    assert b.delay_ms(10, lambda lo, hi: hi) == 1000  # capped after the jitter


def test_backoff_max_not_above_initial_is_constant():
    assert core.Backoff(500, 100).delay_ms(3) == 100


def test_backoff_from_client_config():
    from rivulet.client.client import KafkaClient
    from rivulet.client.config import resolve
    c = KafkaClient(resolve({"bootstrap.servers": "b:9092", "retry.backoff.ms": 50, "retry.backoff.max.ms": 400},
                            "admin"))
    assert (c.backoff.initial_ms, c.backoff.max_ms) == (50, 400)


def test_attempts_stop_at_the_deadline():
    now = [0.0]
    a = core.Attempts(core.Backoff(100, 1000, jitter=0), deadline=0.25, clock=lambda: now[0])
    assert a.next_delay() == pytest.approx(0.1)
    now[0] = 0.2
    assert a.next_delay() == pytest.approx(0.05)  # no sleeping past the deadline
    assert not a.expired()
    now[0] = 0.25
    assert a.expired() and a.next_delay() == 0


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("code, act", [
    (0, core.Action.OK),
    (ErrorCode.NOT_COORDINATOR, core.Action.FIND_COORDINATOR),
    (ErrorCode.COORDINATOR_NOT_AVAILABLE, core.Action.FIND_COORDINATOR),
    (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, core.Action.RETRY),
    (ErrorCode.CONCURRENT_TRANSACTIONS, core.Action.RETRY),
    (ErrorCode.UNSTABLE_OFFSET_COMMIT, core.Action.RETRY),
    (ErrorCode.NOT_LEADER_OR_FOLLOWER, core.Action.REFRESH_METADATA),
    (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, core.Action.REFRESH_METADATA),
    (ErrorCode.FENCED_LEADER_EPOCH, core.Action.REFRESH_METADATA),
    (ErrorCode.PRODUCER_FENCED, core.Action.FAIL),
    (ErrorCode.GROUP_AUTHORIZATION_FAILED, core.Action.FAIL),
    (ErrorCode.OFFSET_OUT_OF_RANGE, core.Action.FAIL),
])
def test_what_each_error_asks_for(code, act):
    assert core.action(code) is act


def test_fatal_transaction_errors_are_not_retriable():
    assert not core.TXN_FATAL_ERRORS & core.RETRIABLE
    assert ErrorCode.PRODUCER_FENCED in core.TXN_FATAL_ERRORS


def test_operation_not_attempted_yields_to_the_real_error():
    assert core.first_error([0, ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.PRODUCER_FENCED]) == \
        ErrorCode.PRODUCER_FENCED
    assert core.first_error([ErrorCode.OPERATION_NOT_ATTEMPTED]) == ErrorCode.OPERATION_NOT_ATTEMPTED
    assert core.first_error([0, 0]) == 0


def test_check_raises_the_broker_error():
    core.check(0)
    with pytest.raises(ApiError) as e:
        core.check(ErrorCode.GROUP_ID_NOT_FOUND, "x")
    assert e.value.code == ErrorCode.GROUP_ID_NOT_FOUND


# ---------------------------------------------------------------- metadata


def metadata_answer():
    return mr.MetadataResponse(
        brokers=[mr.MetadataResponseBroker(node_id=1, host="h1", port=9092),
                 mr.MetadataResponseBroker(node_id=2, host="h2", port=9092)],
        cluster_id="c", controller_id=2,
        topics=[mr.MetadataResponseTopic(name="t", error_code=0, partitions=[
                    mr.MetadataResponsePartition(partition_index=0, leader_id=1, leader_epoch=3),
                    mr.MetadataResponsePartition(partition_index=1, leader_id=-1, error_code=5)]),
                mr.MetadataResponseTopic(name="__consumer_offsets", error_code=0, is_internal=True,
                                         partitions=[mr.MetadataResponsePartition(partition_index=0, leader_id=2)]),
                mr.MetadataResponseTopic(name="gone", error_code=3)])


def test_metadata_request_names_sorted_topics_or_all():
    assert wire(core.metadata_request(None)).topics is None
    req = wire(core.metadata_request(["b", "a", "b"], allow_auto_create=True))
    assert [t.name for t in req.topics] == ["a", "b"] and req.allow_auto_topic_creation


def test_cluster_reads_a_metadata_answer():
    c = core.Cluster(clock=lambda: 42.0)
    c.update(metadata_answer(), None)
    assert c.brokers == {1: ("h1", 9092), 2: ("h2", 9092)} and c.controller_id == 2 and c.updated_at == 42.0
    assert c.leader("t", 0) == 1 and c.leader("t", 1) == -1 and c.leader("nope", 0) == -1
    assert c.topics["t"].available == [0] and c.topics["t"].partitions[0].leader_epoch == 3
    assert c.partition_counts() == {"t": 2}
    assert c.partition_counts(["__consumer_offsets"]) == {"__consumer_offsets": 1}
    assert c.no_leader_error("gone") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    c.forget_leader("t", 0)
    assert c.leader("t", 0) == -1


def test_cluster_update_for_some_topics_keeps_the_others():
    c = core.Cluster()
    c.update(metadata_answer(), None)
    c.update(mr.MetadataResponse(brokers=[mr.MetadataResponseBroker(node_id=1, host="h1", port=9092)],
                                 topics=[mr.MetadataResponseTopic(name="u", partitions=[])]), ["u", "gone"])
    assert set(c.topics) == {"t", "__consumer_offsets", "u"}


# ---------------------------------------------------------------- coordinators


@pytest.mark.parametrize("version", [0, 3, 4, 6])
def test_find_coordinator_request_at_every_version(version):
    req = wire(core.find_coordinator_request("g", core.TRANSACTION), version)
    if version >= 4:
        assert req.coordinator_keys == ["g"] and req.key_type == 1
    else:
        assert req.key == "g" and (version == 0 or req.key_type == 1)


def test_find_coordinator_answer_single_and_batched():
    single = fcr.FindCoordinatorResponse(error_code=0, node_id=3, host="h", port=1)
    assert core.read_find_coordinator(single) == (0, core.Coordinator(3, "h", 1), "")
    batched = fcr.FindCoordinatorResponse(coordinators=[fcr.Coordinator(
        key="g", node_id=-1, host="", port=-1, error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        error_message="loading")])
    assert core.read_find_coordinator(batched) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None, "loading")


# ---------------------------------------------------------------- retry decisions (no sockets)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def attempts(clock: Clock, deadline: float = 1.0) -> core.Attempts:
    return core.Attempts(core.Backoff(100, 1000, jitter=0), deadline=deadline, clock=clock)


def coordinator_answer(code: int = 0, node: int = 2, message: str | None = None) -> fcr.FindCoordinatorResponse:
    return fcr.FindCoordinatorResponse(coordinators=[fcr.Coordinator(
        key="g", node_id=node if code == 0 else -1, host="h" if code == 0 else "", port=9 if code == 0 else -1,
        error_code=code, error_message=message)])


def test_coordinator_lookup_backs_off_until_found_and_records_the_broker():
    clock, cluster = Clock(), core.Cluster()
    lookup = core.CoordinatorLookup("g", core.GROUP, attempts(clock), cluster)
    assert wire(lookup.request()).coordinator_keys == ["g"]
    assert lookup.on_response(coordinator_answer(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)) == core.Retry(0.1)
    assert lookup.on_unreachable(ConnectionError("refused")) == core.Retry(0.2)
    assert lookup.on_response(coordinator_answer(ErrorCode.NOT_COORDINATOR)) == core.Retry(0.4)
    assert lookup.on_response(coordinator_answer()) == core.Coordinator(2, "h", 9)
    assert cluster.brokers[2] == ("h", 9)


def test_coordinator_lookup_raises_a_fatal_error_at_once_and_any_when_out_of_time():
    clock = Clock()
    lookup = core.CoordinatorLookup("g", core.GROUP, attempts(clock), core.Cluster())
    with pytest.raises(ApiError) as e:
        lookup.on_response(coordinator_answer(ErrorCode.GROUP_AUTHORIZATION_FAILED, message="no"))
    assert e.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    clock.now = 1.0
    with pytest.raises(ApiError) as e:
        lookup.on_unreachable(ConnectionError("refused"))
    assert e.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE and "refused" in str(e.value)


def test_coordinator_call_retries_what_the_core_says_and_hands_back_the_rest():
    clock = Clock()
    call = core.CoordinatorCall("g", core.GROUP, object(), lambda code: code, attempts(clock))
    assert call.on_response(ErrorCode.NOT_COORDINATOR) == core.Retry(0.1)
    assert call.on_response(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) == core.Retry(0.2)
    assert call.on_unreachable() == core.Retry(0.4)
    assert call.on_response(ErrorCode.ILLEGAL_GENERATION) == ErrorCode.ILLEGAL_GENERATION
    assert call.on_response(0) == 0


@pytest.mark.parametrize("answer_late", [True, False])
def test_coordinator_call_out_of_time(answer_late):
    clock = Clock()
    call = core.CoordinatorCall("g", core.GROUP, object(), lambda code: code, attempts(clock),
                                answer_when_out_of_time=answer_late)
    clock.now = 1.0
    with pytest.raises(ApiError) as e:
        call.on_unreachable()
    assert e.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    if answer_late:  # the asyncio transport's callers read the error from the answer
        assert call.on_response(ErrorCode.NOT_COORDINATOR) == ErrorCode.NOT_COORDINATOR
    else:
        with pytest.raises(ApiError) as e:
            call.on_response(ErrorCode.NOT_COORDINATOR)
        assert e.value.code == ErrorCode.NOT_COORDINATOR


def partition_results(ok=(), errors=()) -> core.PartitionResults:
    return core.PartitionResults(ok={TP("t", p): v for p, v in ok}, errors={TP("t", p): c for p, c in errors})


def led_cluster() -> core.Cluster:
    cluster = core.Cluster()
    cluster.update(mr.MetadataResponse(brokers=[mr.MetadataResponseBroker(node_id=1, host="h", port=1)],
                                       topics=[mr.MetadataResponseTopic(name="t", partitions=[
                                           mr.MetadataResponsePartition(partition_index=p, leader_id=1)
                                           for p in (0, 1)])]), None)
    return cluster


def test_leader_retry_asks_again_for_partitions_whose_leader_moved():
    clock, cluster = Clock(), led_cluster()
    retry = core.LeaderRetry({TP("t", 0): -1, TP("t", 1): -1}, "ListOffsets", attempts(clock), cluster)
    retry.on_results(partition_results(ok=[(0, 7)], errors=[(1, ErrorCode.NOT_LEADER_OR_FOLLOWER)]))
    assert retry.remaining == {TP("t", 1): -1} and cluster.leader("t", 1) < 0 and cluster.leader("t", 0) == 1
    assert retry.next_round() == core.Retry(0.1)
    retry.on_results(partition_results(ok=[(1, 9)]))
    assert retry.next_round() is None and retry.found == {TP("t", 0): 7, TP("t", 1): 9}


def test_leader_retry_raises_what_cannot_be_retried():
    retry = core.LeaderRetry({TP("t", 0): -1}, "DeleteRecords", attempts(Clock()), led_cluster())
    with pytest.raises(ApiError, match="DeleteRecords t-0") as e:
        retry.on_results(partition_results(errors=[(0, ErrorCode.OFFSET_OUT_OF_RANGE)]))
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


@pytest.mark.parametrize("per_answer", [True, False])
def test_leader_retry_out_of_time(per_answer):
    clock = Clock()
    retry = core.LeaderRetry({TP("t", 0): -1}, "ListOffsets", attempts(clock), led_cluster(),
                             deadline_per_answer=per_answer)
    clock.now = 1.0
    late = partition_results(errors=[(0, ErrorCode.NOT_LEADER_OR_FOLLOWER)])
    if per_answer:  # the admin client: the late error itself
        with pytest.raises(ApiError) as e:
            retry.on_results(late)
        assert e.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    else:  # the blocking transport: the partitions still without an answer
        retry.on_results(late)
        with pytest.raises(ApiError) as e:
            retry.next_round()
        assert e.value.code == ErrorCode.LEADER_NOT_AVAILABLE


# ---------------------------------------------------------------- offsets


def test_list_offsets_round_trip():
    req = wire(core.list_offsets_request({("t", 0): core.EARLIEST, ("t", 1): 1234, ("u", 0): core.LATEST},
                                         isolation_level=1, timeout_ms=500))
    assert req.isolation_level == 1 and req.timeout_ms == 500 and req.replica_id == -1
    assert {(t.name, p.partition_index): p.timestamp for t in req.topics for p in t.partitions} == \
        {("t", 0): -2, ("t", 1): 1234, ("u", 0): -1}
    resp = lor.ListOffsetsResponse(topics=[lor.ListOffsetsTopicResponse(name="t", partitions=[
        lor.ListOffsetsPartitionResponse(partition_index=0, offset=5, timestamp=-1, leader_epoch=2),
        lor.ListOffsetsPartitionResponse(partition_index=1, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)])])
    res = core.read_list_offsets(resp)
    assert res.ok == {TP("t", 0): core.ListedOffset(5, -1, 2)} and res.ok[("t", 0)].offset == 5
    assert res.errors == {("t", 1): ErrorCode.NOT_LEADER_OR_FOLLOWER}
    with pytest.raises(ApiError):
        res.raise_first("ListOffsets")


def test_offset_fetch_round_trip():
    req = wire(core.offset_fetch_request("g", [("t", 0), ("t", 2), ("u", 1)], require_stable=True))
    assert req.group_id == "g" and req.require_stable
    assert {t.name: t.partition_indexes for t in req.topics} == {"t": [0, 2], "u": [1]}
    assert wire(core.offset_fetch_request("g", None)).topics is None
    resp = ofr.OffsetFetchResponse(topics=[ofr.OffsetFetchResponseTopic(name="t", partitions=[
        ofr.OffsetFetchResponsePartition(partition_index=0, committed_offset=10, metadata="m", committed_leader_epoch=4),
        ofr.OffsetFetchResponsePartition(partition_index=2, committed_offset=-1),
        ofr.OffsetFetchResponsePartition(partition_index=3, error_code=ErrorCode.UNSTABLE_OFFSET_COMMIT)])])
    res = core.read_offset_fetch(resp)
    assert res.ok == {("t", 0): core.OffsetAndMetadata(10, "m", 4), ("t", 2): None}
    assert core.offset_fetch_error(resp) == ErrorCode.UNSTABLE_OFFSET_COMMIT
    group_err = ofr.OffsetFetchResponse(error_code=ErrorCode.NOT_COORDINATOR)
    assert core.read_offset_fetch(group_err).errors == {("", -1): ErrorCode.NOT_COORDINATOR}
    assert core.offset_fetch_error(group_err) == ErrorCode.NOT_COORDINATOR


def test_offset_commit_round_trip():
    req = wire(core.offset_commit_request("g", {("t", 1): core.OffsetAndMetadata(7, "meta", 3),
                                                ("t", 0): core.OffsetAndMetadata(5)}, 4, "m-1", "i-1"))
    assert (req.group_id, req.generation_id_or_member_epoch, req.member_id, req.group_instance_id) == \
        ("g", 4, "m-1", "i-1")
    parts = {p.partition_index: p for p in req.topics[0].partitions}
    assert (parts[1].committed_offset, parts[1].committed_metadata, parts[1].committed_leader_epoch) == (7, "meta", 3)
    assert (parts[0].committed_offset, parts[0].committed_leader_epoch) == (5, -1)
    standalone = wire(core.offset_commit_request("g", {("t", 0): core.OffsetAndMetadata(1)}))
    assert standalone.generation_id_or_member_epoch == -1 and standalone.member_id == ""
    resp = ocr.OffsetCommitResponse(topics=[ocr.OffsetCommitResponseTopic(name="t", partitions=[
        ocr.OffsetCommitResponsePartition(partition_index=0),
        ocr.OffsetCommitResponsePartition(partition_index=1, error_code=ErrorCode.REBALANCE_IN_PROGRESS)])])
    res = core.read_offset_commit(resp)
    assert list(res.ok) == [("t", 0)] and res.first_error() == ErrorCode.REBALANCE_IN_PROGRESS


# ---------------------------------------------------------------- transactions


PID = core.ProducerIdAndEpoch(1000, 3)


def test_init_producer_id():
    req = wire(core.init_producer_id_request("tx", 60000))
    assert (req.transactional_id, req.transaction_timeout_ms, req.producer_id, req.producer_epoch) == \
        ("tx", 60000, -1, -1)
    assert wire(core.init_producer_id_request(None, 1)).transactional_id is None


def test_add_partitions_to_txn_at_v3_and_its_errors():
    req = wire(core.add_partitions_to_txn_request("tx", PID, [("t", 0), ("t", 1), ("u", 0)]))
    assert (req.v3_and_below_transactional_id, req.v3_and_below_producer_id, req.v3_and_below_producer_epoch) == \
        ("tx", 1000, 3)
    assert {t.name: t.partitions for t in req.v3_and_below_topics} == {"t": [0, 1], "u": [0]}
    resp = aptr.AddPartitionsToTxnResponse(results_by_topic_v3_and_below=[aptr.AddPartitionsToTxnTopicResult(
        name="t", results_by_partition=[
            aptr.AddPartitionsToTxnPartitionResult(partition_index=0, partition_error_code=55),
            aptr.AddPartitionsToTxnPartitionResult(partition_index=1,
                                                   partition_error_code=ErrorCode.CONCURRENT_TRANSACTIONS)])])
    assert core.add_partitions_to_txn_error(resp) == ErrorCode.CONCURRENT_TRANSACTIONS


def test_offsets_in_a_transaction():
    req = wire(core.add_offsets_to_txn_request("tx", PID, "g"))
    assert (req.transactional_id, req.producer_id, req.producer_epoch, req.group_id) == ("tx", 1000, 3, "g")
    req = wire(core.txn_offset_commit_request("tx", PID, "g", {("t", 0): core.OffsetAndMetadata(9, "x")}, 2, "m"))
    assert (req.group_id, req.generation_id, req.member_id) == ("g", 2, "m")
    p = req.topics[0].partitions[0]
    assert (p.partition_index, p.committed_offset, p.committed_metadata) == (0, 9, "x")
    resp = tocr.TxnOffsetCommitResponse(topics=[tocr.TxnOffsetCommitResponseTopic(name="t", partitions=[
        tocr.TxnOffsetCommitResponsePartition(partition_index=0, error_code=ErrorCode.NOT_COORDINATOR)])])
    assert core.txn_offset_commit_error(resp) == ErrorCode.NOT_COORDINATOR


def test_end_txn():
    req = wire(core.end_txn_request("tx", PID, commit=False))
    assert (req.transactional_id, req.producer_id, req.producer_epoch, req.committed) == ("tx", 1000, 3, False)


# ---------------------------------------------------------------- admin


def test_create_topics_with_counts_or_assignments():
    req = wire(core.create_topics_request(
        [NewTopic("a", 3, 1, config={"cleanup.policy": "compact"}), NewTopic("b", replica_assignment=[[1], [2]])],
        1000, validate_only=True))
    a, b = req.topics
    assert (a.num_partitions, a.replication_factor, [(c.name, c.value) for c in a.configs]) == \
        (3, 1, [("cleanup.policy", "compact")])
    assert (b.num_partitions, [x.broker_ids for x in b.assignments]) == (-1, [[1], [2]])
    assert req.validate_only and req.timeout_ms == 1000


def test_admin_requests_survive_the_wire():
    assert [t.name for t in wire(core.delete_topics_request(["a"], 10)).topics] == ["a"]
    assert wire(core.delete_topics_request(["a"], 10), 5).topic_names == ["a"]
    assert wire(core.create_partitions_request("a", 4, 10)).topics[0].count == 4
    d = wire(core.describe_configs_request(2, "a", ["x"])).resources[0]
    assert (d.resource_type, d.resource_name, d.configuration_keys) == (2, "a", ["x"])
    c = wire(core.incremental_alter_configs_request(2, "a", [("x", 1, None)])).resources[0].configs[0]
    assert (c.name, c.config_operation, c.value) == ("x", 1, None)
    assert wire(core.alter_configs_request(2, "a", {"x": "1"})).resources[0].configs[0].value == "1"
    assert wire(core.delete_records_request({("t", 0): 5}, 10)).topics[0].partitions[0].offset == 5
    assert wire(core.list_groups_request(["Empty"])).states_filter == ["Empty"]
    assert wire(core.describe_groups_request(["g"])).groups == ["g"]
    assert wire(core.delete_groups_request(["g"])).groups_names == ["g"]


def test_delete_records_answer():
    resp = drr.DeleteRecordsResponse(topics=[drr.DeleteRecordsTopicResult(name="t", partitions=[
        drr.DeleteRecordsPartitionResult(partition_index=0, low_watermark=5),
        drr.DeleteRecordsPartitionResult(partition_index=1, error_code=ErrorCode.OFFSET_OUT_OF_RANGE)])])
    res = core.read_delete_records(resp)
    assert res.ok == {("t", 0): 5} and res.errors == {("t", 1): ErrorCode.OFFSET_OUT_OF_RANGE}


# ---------------------------------------------------------------- connections, produce, fetch


def test_api_versions_and_version_choice():
    from rivulet.protocol.messages import api_versions_response as avr
    assert wire(core.api_versions_request(), 3).client_software_name == "rivulet"
    resp = avr.ApiVersionsResponse(api_keys=[avr.ApiVersion(api_key=1, min_version=4, max_version=17),
                                             avr.ApiVersion(api_key=9, min_version=0, max_version=9)])
    versions = core.read_api_versions(resp, "b:1")
    assert versions == {1: (4, 17), 9: (0, 9)}
    assert core.pick_version(1, versions[1]) == 12      # Fetch: topic ids from v13
    assert core.pick_version(9, versions[9]) == 7       # OffsetFetch: grouped from v8
    assert core.pick_version(9, versions[9], cap=3) == 3
    with pytest.raises(ApiError) as e:
        core.pick_version(1, None)
    assert e.value.code == ErrorCode.UNSUPPORTED_VERSION
    with pytest.raises(ApiError):
        core.read_api_versions(avr.ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION), "b:1")


def test_produce_and_fetch_requests():
    from rivulet.protocol.records import Record, encode_batch
    batch = encode_batch([Record(0, 1, b"k", b"v", [])])
    req = wire(core.produce_request("tx", -1, 3000, {("t", 1): batch, ("t", 0): batch, ("u", 0): batch}))
    assert (req.transactional_id, req.acks, req.timeout_ms) == ("tx", -1, 3000)
    assert {t.name: [p.index for p in t.partition_data] for t in req.topic_data} == {"t": [1, 0], "u": [0]}
    assert bytes(req.topic_data[0].partition_data[0].records) == batch
    req = wire(core.fetch_request({("t", 0): core.FetchPosition(5), ("t", 1): core.FetchPosition(9, 3, 2)}, 500, 1, 1 << 20, 1 << 16, isolation_level=1))
    assert (req.max_wait_ms, req.min_bytes, req.max_bytes, req.isolation_level, req.session_epoch) == \
        (500, 1, 1 << 20, 1, -1)
    assert [(p.partition, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch, p.last_fetched_epoch)
            for p in req.topics[0].partitions] == [(0, 5, 1 << 16, -1, -1), (1, 9, 1 << 16, 3, 2)]


def test_fetch_names_topics_by_id_when_every_id_is_known():
    import uuid
    tid = uuid.uuid4()
    positions = {("t", 0): core.FetchPosition(5), ("u", 0): core.FetchPosition(1)}
    assert core.fetch_version_cap({"t": tid, "u": uuid.uuid4()}, ["t", "u"]) == 17
    assert core.fetch_version_cap({"t": tid, "u": None}, ["t", "u"]) is None  # v12 and names
    assert core.fetch_version_cap({"t": tid}, ["t", "u"]) is None
    req = wire(core.fetch_request(positions, 500, 1, 1 << 20, 1 << 16, topic_ids={"t": tid, "u": tid}), 17)
    assert [t.topic_id for t in req.topics] == [tid, tid]
    resp = fr.FetchResponse(responses=[fr.FetchableTopicResponse(topic="", topic_id=tid, partitions=[])])
    assert core.fetch_response_topic(resp.responses[0], {tid: "t"}) == "t"
    assert core.fetch_response_topic(fr.FetchableTopicResponse(topic="old", partitions=[]), {}) == "old"


def test_offsets_for_leader_epoch_round_trip():
    req = wire(core.offsets_for_leader_epoch_request({("t", 0): (5, 3), ("t", 1): (5, 4)}))
    assert req.replica_id == core.CONSUMER_REPLICA_ID
    assert [(p.partition, p.current_leader_epoch, p.leader_epoch) for p in req.topics[0].partitions] == \
        [(0, 5, 3), (1, 5, 4)]
    resp = oler.OffsetForLeaderEpochResponse(topics=[oler.OffsetForLeaderTopicResult(topic="t", partitions=[
        oler.EpochEndOffset(error_code=0, partition=0, leader_epoch=3, end_offset=120),
        oler.EpochEndOffset(error_code=int(ErrorCode.FENCED_LEADER_EPOCH), partition=1)])])
    res = core.read_offsets_for_leader_epoch(resp)
    assert res.ok == {("t", 0): core.EpochEndOffset(3, 120)}
    assert res.errors == {("t", 1): ErrorCode.FENCED_LEADER_EPOCH}
    assert core.EpochEndOffset(-1, -1).undefined and not core.EpochEndOffset(0, 0).undefined


def test_metadata_keeps_a_newer_leader_epoch_and_takes_leader_hints():
    def answer(leader: int, epoch: int) -> mr.MetadataResponse:
        return mr.MetadataResponse(
            brokers=[mr.MetadataResponseBroker(node_id=n, host="h", port=9000 + n) for n in (1, 2, 3)],
            cluster_id="c", controller_id=1, topics=[mr.MetadataResponseTopic(
                name="t", topic_id=None, partitions=[mr.MetadataResponsePartition(
                    partition_index=0, leader_id=leader, leader_epoch=epoch)])])
    cluster = core.Cluster()
    cluster.update(answer(2, 7), ["t"])
    assert (cluster.leader("t", 0), cluster.leader_epoch("t", 0)) == (2, 7)
    cluster.update(answer(1, 6), ["t"])  # a broker behind the controller
    assert (cluster.leader("t", 0), cluster.leader_epoch("t", 0)) == (2, 7)
    cluster.update(answer(3, 8), ["t"])
    assert (cluster.leader("t", 0), cluster.leader_epoch("t", 0)) == (3, 8)
    assert not cluster.new_leader("t", 0, 1, 7)  # older than known
    assert cluster.new_leader("t", 0, 1, 9)
    assert (cluster.leader("t", 0), cluster.leader_epoch("t", 0)) == (1, 9)
    assert not cluster.new_leader("t", 0, 42, 10)  # a broker the metadata does not know
    cluster.add_brokers([(42, "h42", 9042)])       # ... until an answer names its endpoint
    assert cluster.new_leader("t", 0, 42, 10) and cluster.leader("t", 0) == 42


# ---------------------------------------------------------------- group membership


def test_join_and_sync_group():
    req = wire(core.join_group_request("g", "m-1", "i-1", 10000, 300000, [("range", b"r"), ("roundrobin", b"rr")],
                                       "new topics"))
    assert (req.group_id, req.member_id, req.group_instance_id, req.session_timeout_ms, req.rebalance_timeout_ms,
            req.protocol_type, req.reason) == ("g", "m-1", "i-1", 10000, 300000, "consumer", "new topics")
    assert [(p.name, bytes(p.metadata)) for p in req.protocols] == [("range", b"r"), ("roundrobin", b"rr")]
    req = wire(core.sync_group_request("g", 3, "m-1", None, "range", {"m-1": b"a", "m-2": b"b"}))
    assert (req.generation_id, req.protocol_type, req.protocol_name) == (3, "consumer", "range")
    assert {a.member_id: bytes(a.assignment) for a in req.assignments} == {"m-1": b"a", "m-2": b"b"}


def test_heartbeat_and_leave_group():
    req = wire(core.heartbeat_request("g", 3, "m-1", "i-1"))
    assert (req.group_id, req.generation_id, req.member_id, req.group_instance_id) == ("g", 3, "m-1", "i-1")
    assert wire(core.leave_group_request("g", "m-1"), 2).member_id == "m-1"
    assert [(m.member_id, m.reason) for m in wire(core.leave_group_request("g", "m-1", "bye")).members] == \
        [("m-1", "bye")]


def test_offset_delete_request_and_answer():
    from rivulet.protocol.messages import offset_delete_response as odr
    req = wire(core.offset_delete_request("g", [TP("b", 2), TP("a", 1), TP("b", 0)]), 0)
    assert req.group_id == "g"
    assert {t.name: [p.partition_index for p in t.partitions] for t in req.topics} == {"a": [1], "b": [0, 2]}
    resp = odr.OffsetDeleteResponse(error_code=0, throttle_time_ms=0, topics=[odr.OffsetDeleteResponseTopic(
        name="b", partitions=[odr.OffsetDeleteResponsePartition(partition_index=0, error_code=0),
                              odr.OffsetDeleteResponsePartition(
                                  partition_index=2, error_code=ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)])])
    assert core.read_offset_delete(resp) == {TP("b", 0): 0, TP("b", 2): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC}
    with pytest.raises(ApiError) as e:
        core.read_offset_delete(odr.OffsetDeleteResponse(error_code=ErrorCode.NON_EMPTY_GROUP, throttle_time_ms=0,
                                                         topics=[]))
    assert e.value.code == ErrorCode.NON_EMPTY_GROUP


def test_describe_log_dirs_sizes_per_partition() -> None:
    from rivulet.protocol.messages import describe_log_dirs_response as dldr
    assert core.describe_log_dirs_request().topics is None  # every partition
    resp = dldr.DescribeLogDirsResponse(error_code=0, results=[
        dldr.DescribeLogDirsResult(error_code=0, log_dir="/a", topics=[dldr.DescribeLogDirsTopic(name="t", partitions=[
            dldr.DescribeLogDirsPartition(partition_index=0, partition_size=120, offset_lag=0, is_future_key=False),
            dldr.DescribeLogDirsPartition(partition_index=1, partition_size=9, offset_lag=0, is_future_key=True)])]),
        dldr.DescribeLogDirsResult(error_code=56, log_dir="/b", topics=[])])
    assert core.read_describe_log_dirs(resp) == {"/a": {TP("t", 0): 120}, "/b": {}}
    with pytest.raises(ApiError):
        core.read_describe_log_dirs(dldr.DescribeLogDirsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                                 results=[]))
