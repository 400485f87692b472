"""The ACL matrix: for every API a single broker serves, a principal without the permissions
it needs gets Kafka's authorization error (or sees nothing, for the APIs that filter) and
changes nothing; with them, the request goes through. ``MATRIX`` is the one table; the same
table is in docs/security.md (``test_doc_has_the_matrix`` keeps them equal).

The broker listens on SASL_PLAINTEXT with PLAIN users: the administrator authenticates as
User:admin, a super user, and sets the ACLs; the principal under test is User:alice, who has
exactly the ACLs each row grants.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

import controller_requests as ctl
from rivulet.client import core
from rivulet.client.connection import BrokerConnection
from rivulet.protocol import records
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.messages import (
    add_offsets_to_txn_request as aotq,
    add_partitions_to_txn_request as aptq,
    alter_client_quotas_request as acqq,
    alter_configs_request as acq,
    alter_replica_log_dirs_request as arlq,
    create_acls_request as caq,
    create_partitions_request as cpq,
    create_topics_request as ctq,
    delete_acls_request as daq,
    delete_groups_request as dgq,
    delete_records_request as drq,
    delete_topics_request as dtq,
    describe_acls_request as dsaq,
    describe_client_quotas_request as dcqq,
    describe_cluster_request as dclq,
    describe_configs_request as dcfq,
    describe_groups_request as dgrq,
    describe_log_dirs_request as dldq,
    describe_producers_request as dpq,
    describe_topic_partitions_request as dtpq,
    describe_transactions_request as dtxq,
    end_txn_request as etq,
    fetch_request as fq,
    find_coordinator_request as fcq,
    heartbeat_request as hbq,
    incremental_alter_configs_request as iacq,
    init_producer_id_request as ipq,
    join_group_request as jgq,
    leave_group_request as lgq,
    list_config_resources_request as lcrq,
    list_groups_request as lgrq,
    list_offsets_request as loq,
    list_transactions_request as ltq,
    metadata_request as mq,
    offset_commit_request as ocq,
    offset_delete_request as odq,
    offset_fetch_request as ofq,
    offset_for_leader_epoch_request as oleq,
    produce_request as pq,
    sync_group_request as sgq,
    txn_offset_commit_request as tocq,
    write_txn_markers_request as wtmq,
)
from rivulet.protocol.messages import alter_partition_reassignments_request as apraq
from rivulet.protocol.messages import consumer_group_describe_request as cgdq
from rivulet.protocol.messages import consumer_group_heartbeat_request as cghq
from rivulet.protocol.messages import share_group_describe_request as sgdq
from rivulet.protocol.messages import share_group_heartbeat_request as sghq
from rivulet.protocol.messages import streams_group_describe_request as stdq
from rivulet.protocol.messages import streams_group_heartbeat_request as sthq
from rivulet.protocol.messages import alter_partition_request as apaq
from rivulet.protocol.messages import alter_user_scram_credentials_request as ausq
from rivulet.protocol.messages import controlled_shutdown_request as csq
from rivulet.protocol.messages import elect_leaders_request as elq
from rivulet.protocol.messages import list_partition_reassignments_request as lpraq
from rivulet.protocol.messages import describe_user_scram_credentials_request as dusq
from rivulet.protocol.messages import create_delegation_token_request as cdtq
from rivulet.protocol.messages import describe_delegation_token_request as ddtq
from rivulet.protocol.messages import update_features_request as ufq
from rivulet.protocol.messages.api_versions_request import ApiVersionsRequest
from rivulet.security.acls import (
    AccessControlEntry,
    AclBinding,
    AclOperation as Op,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType as RT,
)
from rivulet.security.client_config import SaslCredentials
from rivulet.testing import BrokerProcess, free_port
from tests.group_members import find_coordinator

pytestmark = pytest.mark.integration

ADMIN, USER = SaslCredentials("PLAIN", "admin", "admin-secret"), SaslCredentials("PLAIN", "alice", "alice-secret")
PRINCIPAL = "User:alice"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
T, DOOMED, NEW, AUTO = "acl-topic", "acl-doomed", "acl-new", "acl-auto"
G, DOOMED_GROUP, JOIN_GROUP = "acl-group", "acl-doomed-group", "acl-join-group"
CONSUMER_GROUP = "acl-consumer-group"  # joined with ConsumerGroupHeartbeat (KIP-848)
SHARE_GROUP = "acl-share-group"  # joined with ShareGroupHeartbeat (KIP-932)
STREAMS_GROUP = "acl-streams-group"  # joined with StreamsGroupHeartbeat (KIP-1071)
TX, TX_INIT = "acl-tx", "acl-tx-init"
AUTH_ERRORS = {"TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
               "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"}
ANY_OTHER = "not an authorization error"


def name(code: int) -> str:
    return ErrorCode(code).name


@dataclass(frozen=True)
class Need:
    resource_type: RT
    operation: Op
    name: str

    def __str__(self) -> str:
        return f"{self.operation.name} on {self.resource_type.name}"


@dataclass
class Ctx:
    user: BrokerConnection
    admin: BrokerConnection
    pid: int = -1
    epoch: int = -1


Call = Callable[[Ctx], Awaitable[str]]


@dataclass
class Row:
    api: str
    needs: tuple[Need, ...]
    denied: str
    call: Call
    allowed: str = "NONE"
    given: tuple[Need, ...] = field(default=())  # granted in both cases
    cluster: bool = False  # served in cluster mode only (brokers' and the controller's requests)


# ------------------------------------------------------------------ the calls
def _batch(transactional: bool = False, pid: int = -1, epoch: int = -1) -> bytes:
    return records.encode_batch([records.Record(0, None, None, b"v", [])], producer_id=pid, producer_epoch=epoch,
                                base_sequence=0 if pid >= 0 else -1, transactional=transactional)


async def produce(c: Ctx, transactional_id: str | None = None) -> str:
    r = await c.user.send(pq.ProduceRequest(
        transactional_id=transactional_id, acks=1, timeout_ms=5000,
        topic_data=[pq.TopicProduceData(name=T, partition_data=[pq.PartitionProduceData(
            index=0, records=_batch(transactional_id is not None, c.pid, c.epoch))])]))
    return name(r.responses[0].partition_responses[0].error_code)


async def produce_txn(c: Ctx) -> str:
    return await produce(c, TX)


async def fetch(c: Ctx) -> str:
    r = await c.user.send(fq.FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[fq.FetchTopic(topic=T, partitions=[fq.FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=-1,
            log_start_offset=-1, last_fetched_epoch=-1)])], forgotten_topics_data=[], rack_id=""), version=12)
    return name(r.responses[0].partitions[0].error_code)


async def list_offsets(c: Ctx) -> str:
    r = await c.user.send(loq.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[loq.ListOffsetsTopic(
        name=T, partitions=[loq.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])]))
    return name(r.topics[0].partitions[0].error_code)


async def metadata_named(c: Ctx) -> str:
    r = await c.user.send(mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name=T)],
                                             allow_auto_topic_creation=False))
    return name(r.topics[0].error_code)


async def metadata_all(c: Ctx) -> str:
    r = await c.user.send(mq.MetadataRequest(topics=None, allow_auto_topic_creation=False))
    return "listed" if T in {t.name for t in r.topics} else "hidden"


async def metadata_auto_create(c: Ctx) -> str:
    """As Kafka 4.3, the request that starts the creation is answered UNKNOWN_TOPIC_OR_PARTITION;
    the topic is there when the client asks again."""
    for _ in range(50):
        r = await c.user.send(mq.MetadataRequest(topics=[mq.MetadataRequestTopic(name=AUTO)],
                                                 allow_auto_topic_creation=True))
        if r.topics[0].error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            break
        await asyncio.sleep(0.1)
    return name(r.topics[0].error_code)


async def offset_commit(c: Ctx) -> str:
    r = await c.user.send(ocq.OffsetCommitRequest(
        group_id=G, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[ocq.OffsetCommitRequestTopic(name=T, partitions=[ocq.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])]), version=8)
    return name(r.topics[0].partitions[0].error_code)


async def offset_fetch(c: Ctx) -> str:
    r = await c.user.send(ofq.OffsetFetchRequest(group_id=G, topics=[ofq.OffsetFetchRequestTopic(
        name=T, partition_indexes=[0])]), version=7)
    return name(r.error_code)


async def find_group_coordinator(c: Ctx) -> str:
    r = await c.user.send(fcq.FindCoordinatorRequest(key_type=0, coordinator_keys=[G]), version=4)
    return name(r.coordinators[0].error_code)


async def find_txn_coordinator(c: Ctx) -> str:
    r = await c.user.send(fcq.FindCoordinatorRequest(key_type=1, coordinator_keys=[TX]), version=4)
    return name(r.coordinators[0].error_code)


async def join_group(c: Ctx) -> str:
    r = await c.user.send(jgq.JoinGroupRequest(
        group_id=JOIN_GROUP, session_timeout_ms=600000, rebalance_timeout_ms=10000, member_id="",
        group_instance_id=None, protocol_type="consumer",
        protocols=[jgq.JoinGroupRequestProtocol(name="range", metadata=b"")], reason=None), version=5)
    return name(r.error_code)


async def sync_group(c: Ctx) -> str:
    r = await c.user.send(sgq.SyncGroupRequest(group_id=JOIN_GROUP, generation_id=1, member_id="m",
                                               group_instance_id=None, protocol_type="consumer",
                                               protocol_name="range", assignments=[]), version=5)
    return name(r.error_code)


async def heartbeat(c: Ctx) -> str:
    r = await c.user.send(hbq.HeartbeatRequest(group_id=JOIN_GROUP, generation_id=1, member_id="m",
                                               group_instance_id=None))
    return name(r.error_code)


async def consumer_group_heartbeat(c: Ctx) -> str:
    r = await c.user.send(cghq.ConsumerGroupHeartbeatRequest(
        group_id=CONSUMER_GROUP, member_id="acl-member-0123456789", member_epoch=0, rebalance_timeout_ms=30000,
        subscribed_topic_names=[T], topic_partitions=[]))
    return name(r.error_code)


async def consumer_group_describe(c: Ctx) -> str:
    r = await c.user.send(cgdq.ConsumerGroupDescribeRequest(group_ids=[G], include_authorized_operations=True))
    return name(r.groups[0].error_code)


async def share_group_heartbeat(c: Ctx) -> str:
    r = await c.user.send(sghq.ShareGroupHeartbeatRequest(
        group_id=SHARE_GROUP, member_id="acl-share-member-0123456789", member_epoch=0, subscribed_topic_names=[T]))
    return name(r.error_code)


async def share_group_describe(c: Ctx) -> str:
    r = await c.user.send(sgdq.ShareGroupDescribeRequest(group_ids=[G], include_authorized_operations=True))
    return name(r.groups[0].error_code)


async def streams_group_heartbeat(c: Ctx) -> str:
    """A member joining with a topology that reads the topic (and needs no internal topic)."""
    r = await c.user.send(sthq.StreamsGroupHeartbeatRequest(
        group_id=STREAMS_GROUP, member_id="acl-streams-member-0123456789", member_epoch=0,
        endpoint_information_epoch=-1, rebalance_timeout_ms=30000, topology=sthq.Topology(epoch=1, subtopologies=[
            sthq.Subtopology(subtopology_id="0", source_topics=[T], source_topic_regex=[], state_changelog_topics=[],
                             repartition_sink_topics=[], repartition_source_topics=[], copartition_groups=[])]),
        active_tasks=[], standby_tasks=[], warmup_tasks=[], process_id="acl-process", client_tags=[],
        task_offsets=None, task_end_offsets=None, shutdown_application=False))
    return name(r.error_code)


async def streams_group_describe(c: Ctx) -> str:
    r = await c.user.send(stdq.StreamsGroupDescribeRequest(group_ids=[G], include_authorized_operations=True))
    return name(r.groups[0].error_code)


async def leave_group(c: Ctx) -> str:
    r = await c.user.send(lgq.LeaveGroupRequest(group_id=JOIN_GROUP, member_id="m"), version=2)
    return name(r.error_code)


async def describe_groups(c: Ctx) -> str:
    r = await c.user.send(dgrq.DescribeGroupsRequest(groups=[G], include_authorized_operations=True))
    return name(r.groups[0].error_code)


async def list_groups(c: Ctx) -> str:
    r = await c.user.send(lgrq.ListGroupsRequest(states_filter=[], types_filter=[]))
    return "listed" if G in {g.group_id for g in r.groups} else "hidden"


async def api_versions(c: Ctx) -> str:
    r = await c.user.send(ApiVersionsRequest(client_software_name="t", client_software_version="1"), version=3)
    return name(r.error_code)


async def create_topics(c: Ctx) -> str:
    r = await c.user.send(ctq.CreateTopicsRequest(topics=[ctq.CreatableTopic(
        name=NEW, num_partitions=1, replication_factor=1, assignments=[], configs=[])], timeout_ms=5000,
        validate_only=False))
    return name(r.topics[0].error_code)


async def delete_topics(c: Ctx) -> str:
    r = await c.user.send(dtq.DeleteTopicsRequest(topic_names=[DOOMED], timeout_ms=5000), version=5)
    return name(r.responses[0].error_code)


async def delete_records(c: Ctx) -> str:
    r = await c.user.send(drq.DeleteRecordsRequest(topics=[drq.DeleteRecordsTopic(
        name=T, partitions=[drq.DeleteRecordsPartition(partition_index=1, offset=0)])], timeout_ms=5000))
    return name(r.topics[0].partitions[0].error_code)


async def init_producer_id_txn(c: Ctx) -> str:
    r = await c.user.send(ipq.InitProducerIdRequest(transactional_id=TX_INIT, transaction_timeout_ms=600000,
                                                    producer_id=-1, producer_epoch=-1))
    return name(r.error_code)


async def init_producer_id_idempotent(c: Ctx) -> str:
    r = await c.user.send(ipq.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=600000,
                                                    producer_id=-1, producer_epoch=-1))
    return name(r.error_code)


async def offset_for_leader_epoch(c: Ctx) -> str:
    r = await c.user.send(oleq.OffsetForLeaderEpochRequest(replica_id=-1, topics=[oleq.OffsetForLeaderTopic(
        topic=T, partitions=[oleq.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)])]))
    return name(r.topics[0].partitions[0].error_code)


async def add_partitions_to_txn(c: Ctx) -> str:
    r = await c.user.send(aptq.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TX, v3_and_below_producer_id=c.pid, v3_and_below_producer_epoch=c.epoch,
        v3_and_below_topics=[aptq.AddPartitionsToTxnTopic(name=T, partitions=[0])]), version=3)
    return name(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)


async def add_offsets_to_txn(c: Ctx) -> str:
    r = await c.user.send(aotq.AddOffsetsToTxnRequest(transactional_id=TX, producer_id=c.pid,
                                                      producer_epoch=c.epoch, group_id=G))
    return name(r.error_code)


async def txn_offset_commit(c: Ctx) -> str:
    r = await c.user.send(tocq.TxnOffsetCommitRequest(
        transactional_id=TX, group_id=G, producer_id=c.pid, producer_epoch=c.epoch, generation_id=-1,
        member_id="", group_instance_id=None, topics=[tocq.TxnOffsetCommitRequestTopic(name=T, partitions=[
            tocq.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                                                 committed_metadata="")])]))
    return name(r.topics[0].partitions[0].error_code)


async def end_txn(c: Ctx) -> str:
    r = await c.user.send(etq.EndTxnRequest(transactional_id=TX, producer_id=c.pid, producer_epoch=c.epoch,
                                            committed=False))
    return name(r.error_code)


async def write_txn_markers(c: Ctx) -> str:
    r = await c.user.send(wtmq.WriteTxnMarkersRequest(markers=[wtmq.WritableTxnMarker(
        producer_id=987654, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
        topics=[wtmq.WritableTxnMarkerTopic(name=T, partition_indexes=[1])])]))
    return name(r.markers[0].topics[0].partitions[0].error_code)


async def describe_acls(c: Ctx) -> str:
    r = await c.user.send(dsaq.DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None,
                                                   pattern_type_filter=1, principal_filter=None, host_filter=None,
                                                   operation=1, permission_type=1))
    return name(r.error_code)


CAROL = dict(resource_type=int(RT.TOPIC), resource_name="carol-topic", principal="User:carol", host="*",
             operation=int(Op.READ), permission_type=int(AclPermissionType.ALLOW))


async def create_acls(c: Ctx) -> str:
    r = await c.user.send(caq.CreateAclsRequest(creations=[caq.AclCreation(resource_pattern_type=3, **CAROL)]))
    return name(r.results[0].error_code)


async def delete_acls(c: Ctx) -> str:
    r = await c.user.send(daq.DeleteAclsRequest(filters=[daq.DeleteAclsFilter(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter="User:carol",
        host_filter=None, operation=1, permission_type=1)]))
    return name(r.filter_results[0].error_code)


async def describe_configs(c: Ctx, rtype: int, rname: str) -> str:
    r = await c.user.send(dcfq.DescribeConfigsRequest(resources=[dcfq.DescribeConfigsResource(
        resource_type=rtype, resource_name=rname, configuration_keys=None)]))
    return name(r.results[0].error_code)


async def describe_topic_configs(c: Ctx) -> str:
    return await describe_configs(c, 2, T)


async def describe_broker_configs(c: Ctx) -> str:
    return await describe_configs(c, 4, "1")


async def alter_topic_configs(c: Ctx) -> str:
    r = await c.user.send(acq.AlterConfigsRequest(resources=[acq.AlterConfigsResource(
        resource_type=2, resource_name=T, configs=[acq.AlterableConfig(name="retention.ms", value="3600000")])],
        validate_only=False))
    return name(r.responses[0].error_code)


async def alter_broker_configs(c: Ctx) -> str:
    r = await c.user.send(acq.AlterConfigsRequest(resources=[acq.AlterConfigsResource(
        resource_type=4, resource_name="", configs=[acq.AlterableConfig(name="log.cleaner.backoff.ms", value="15000"),
                                                    # the whole level: Kafka 4.1+ refuses to drop this one
                                                    acq.AlterableConfig(name="min.insync.replicas", value="1")])],
        validate_only=False))
    return name(r.responses[0].error_code)


async def incremental_alter_topic_configs(c: Ctx) -> str:
    r = await c.user.send(iacq.IncrementalAlterConfigsRequest(resources=[iacq.AlterConfigsResource(
        resource_type=2, resource_name=T, configs=[iacq.AlterableConfig(name="retention.ms", config_operation=0,
                                                                        value="7200000")])], validate_only=False))
    return name(r.responses[0].error_code)


async def describe_client_metrics_configs(c: Ctx) -> str:
    return await describe_configs(c, 16, "acl-matrix-subscription")


async def incremental_alter_client_metrics_configs(c: Ctx) -> str:
    r = await c.user.send(iacq.IncrementalAlterConfigsRequest(resources=[iacq.AlterConfigsResource(
        resource_type=16, resource_name="acl-matrix-subscription", configs=[iacq.AlterableConfig(
            name="interval.ms", config_operation=0, value="60000")])], validate_only=True))
    return name(r.responses[0].error_code)


async def describe_group_configs(c: Ctx) -> str:
    return await describe_configs(c, 32, G)


async def incremental_alter_group_configs(c: Ctx) -> str:
    r = await c.user.send(iacq.IncrementalAlterConfigsRequest(resources=[iacq.AlterConfigsResource(
        resource_type=32, resource_name=G, configs=[iacq.AlterableConfig(
            name="consumer.session.timeout.ms", config_operation=0, value="50000")])], validate_only=True))
    return name(r.responses[0].error_code)


async def alter_group_configs(c: Ctx) -> str:
    r = await c.user.send(acq.AlterConfigsRequest(resources=[acq.AlterConfigsResource(
        resource_type=32, resource_name=G, configs=[acq.AlterableConfig(name="share.isolation.level",
                                                                        value="read_committed")])],
        validate_only=True))
    return name(r.responses[0].error_code)


async def list_config_resources(c: Ctx) -> str:
    r = await c.user.send(lcrq.ListConfigResourcesRequest(resource_types=[]))
    return name(r.error_code)


async def alter_replica_log_dirs(c: Ctx) -> str:
    r = await c.user.send(arlq.AlterReplicaLogDirsRequest(dirs=[arlq.AlterReplicaLogDir(
        path="/nonexistent-dir", topics=[arlq.AlterReplicaLogDirTopic(name=T, partitions=[0])])]))
    return name(r.results[0].partitions[0].error_code)


async def describe_log_dirs(c: Ctx) -> str:
    r = await c.user.send(dldq.DescribeLogDirsRequest(topics=None))
    return name(r.error_code)


async def create_partitions(c: Ctx) -> str:
    r = await c.user.send(cpq.CreatePartitionsRequest(topics=[cpq.CreatePartitionsTopic(
        name=T, count=3, assignments=None)], timeout_ms=5000, validate_only=False))
    return name(r.results[0].error_code)


async def delete_groups(c: Ctx) -> str:
    r = await c.user.send(dgq.DeleteGroupsRequest(groups_names=[DOOMED_GROUP]))
    return name(r.results[0].error_code)


async def offset_delete(c: Ctx) -> str:
    r = await c.user.send(odq.OffsetDeleteRequest(group_id=G, topics=[odq.OffsetDeleteRequestTopic(
        name=T, partitions=[odq.OffsetDeleteRequestPartition(partition_index=0)])]))
    return name(r.error_code)


async def describe_client_quotas(c: Ctx) -> str:
    r = await c.user.send(dcqq.DescribeClientQuotasRequest(components=[], strict=False))
    return name(r.error_code)


async def alter_client_quotas(c: Ctx) -> str:
    r = await c.user.send(acqq.AlterClientQuotasRequest(entries=[acqq.EntryData(
        entity=[acqq.EntityData(entity_type="client-id", entity_name="acl-matrix")],
        ops=[acqq.OpData(key="producer_byte_rate", value=1e9, remove=False)])], validate_only=False))
    return name(r.entries[0].error_code)


async def describe_cluster(c: Ctx) -> str:
    r = await c.user.send(dclq.DescribeClusterRequest(include_cluster_authorized_operations=True))
    ops = r.cluster_authorized_operations
    return "operations reported" if ops > 0 and ops & (1 << int(Op.DESCRIBE)) else "no operations"


async def describe_producers(c: Ctx) -> str:
    r = await c.user.send(dpq.DescribeProducersRequest(topics=[dpq.TopicRequest(name=T, partition_indexes=[0])]))
    return name(r.topics[0].partitions[0].error_code)


async def describe_transactions(c: Ctx) -> str:
    r = await c.user.send(dtxq.DescribeTransactionsRequest(transactional_ids=[TX]))
    return name(r.transaction_states[0].error_code)


async def list_transactions(c: Ctx) -> str:
    r = await c.user.send(ltq.ListTransactionsRequest(state_filters=[], producer_id_filters=[]))
    return "listed" if TX in {t.transactional_id for t in r.transaction_states} else "hidden"


async def describe_scram(c: Ctx) -> str:
    r = await c.user.send(dusq.DescribeUserScramCredentialsRequest(users=None))
    return name(r.error_code)


async def alter_scram(c: Ctx) -> str:
    r = await c.user.send(ausq.AlterUserScramCredentialsRequest(deletions=[], upsertions=[
        ausq.ScramCredentialUpsertion(name="carol", mechanism=1, iterations=4096, salt=b"salt" * 4,
                                      salted_password=b"p" * 32)]))
    return name(r.results[0].error_code)


async def update_features(c: Ctx) -> str:
    r = await c.user.send(ufq.UpdateFeaturesRequest(timeout_ms=5000, validate_only=True, feature_updates=[
        ufq.FeatureUpdateKey(feature="group.version", max_version_level=1, upgrade_type=1)]))
    return name(r.error_code)


async def create_token_for_another(c: Ctx) -> str:
    r = await c.user.send(cdtq.CreateDelegationTokenRequest(
        owner_principal_type="User", owner_principal_name="bob", renewers=[], max_lifetime_ms=-1))
    return name(r.error_code)


async def describe_others_tokens(c: Ctx) -> str:
    admins = [ddtq.DescribeDelegationTokenOwner(principal_type="User", principal_name="admin")]
    if not (await c.admin.send(ddtq.DescribeDelegationTokenRequest(owners=admins))).tokens:
        r = await c.admin.send(cdtq.CreateDelegationTokenRequest(renewers=[], max_lifetime_ms=-1))
        assert r.error_code == 0
    r = await c.user.send(ddtq.DescribeDelegationTokenRequest(owners=admins))
    return "listed" if r.tokens else "hidden"


# ---- brokers' and the controller's requests (cluster mode); stale epochs, so that granted
# requests are refused for what they carry and change nothing either
async def leader_and_isr(c: Ctx) -> str:
    r = await c.user.send(ctl.leader_and_isr(0, [ctl.Part(T, 0, 1, 0, [1], [1])], {T: uuid.uuid4()},
                                             {1: ("127.0.0.1", 1)}))
    return name(r.error_code)


async def update_metadata(c: Ctx) -> str:
    r = await c.user.send(ctl.update_metadata(0, [], {}, {1: ("127.0.0.1", 1)}))
    return name(r.error_code)


async def stop_replica(c: Ctx) -> str:
    r = await c.user.send(ctl.stop_replica(0, {(T, 0): (-2, False)}))
    return name(r.error_code)


async def controlled_shutdown(c: Ctx) -> str:
    r = await c.user.send(csq.ControlledShutdownRequest(broker_id=99, broker_epoch=0))
    return name(r.error_code)


async def alter_partition(c: Ctx) -> str:
    r = await c.user.send(apaq.AlterPartitionRequest(broker_id=99, broker_epoch=0, topics=[]))
    return name(r.error_code)


async def follower_fetch(c: Ctx) -> str:
    r = await c.user.send(fq.FetchRequest(
        replica_id=99, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[fq.FetchTopic(topic=T, partitions=[fq.FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=-1,
            log_start_offset=-1, last_fetched_epoch=-1)])], forgotten_topics_data=[], rack_id=""), version=12)
    return name(r.responses[0].partitions[0].error_code)


async def add_partitions_to_txn_verify(c: Ctx) -> str:
    r = await c.user.send(aptq.AddPartitionsToTxnRequest(transactions=[aptq.AddPartitionsToTxnTransaction(
        transactional_id=TX, producer_id=1, producer_epoch=0, verify_only=True,
        topics=[aptq.AddPartitionsToTxnTopic(name=T, partitions=[0])])]), version=4)
    return name(r.error_code)


async def elect_leaders(c: Ctx) -> str:
    r = await c.user.send(elq.ElectLeadersRequest(election_type=0, topic_partitions=[
        elq.TopicPartitions(topic=T, partitions=[0])], timeout_ms=5000))
    return name(r.error_code)


async def alter_reassignments(c: Ctx) -> str:
    r = await c.user.send(apraq.AlterPartitionReassignmentsRequest(timeout_ms=5000, topics=[]))
    return name(r.error_code)


async def list_reassignments(c: Ctx) -> str:
    r = await c.user.send(lpraq.ListPartitionReassignmentsRequest(timeout_ms=5000, topics=None))
    return name(r.error_code)


async def describe_topic_partitions(c: Ctx) -> str:
    r = await c.user.send(dtpq.DescribeTopicPartitionsRequest(topics=[dtpq.TopicRequest(name=T)],
                                                              response_partition_limit=100))
    return name(r.topics[0].error_code)


def need(rt: RT, op: Op, resource: str | None = None) -> Need:
    default = {RT.TOPIC: T, RT.GROUP: G, RT.TRANSACTIONAL_ID: TX, RT.CLUSTER: "kafka-cluster"}[rt]
    return Need(rt, op, resource or default)


TOPIC_READ, TOPIC_WRITE, TOPIC_DESCRIBE = need(RT.TOPIC, Op.READ), need(RT.TOPIC, Op.WRITE), need(RT.TOPIC, Op.DESCRIBE)
GROUP_READ, TXN_WRITE = need(RT.GROUP, Op.READ), need(RT.TRANSACTIONAL_ID, Op.WRITE)
JOIN_READ = need(RT.GROUP, Op.READ, JOIN_GROUP)
CLUSTER_ACTION = need(RT.CLUSTER, Op.CLUSTER_ACTION)

# The one table: the API, what it needs, what it answers without it (ANY_OTHER: what the
# request itself deserves, authorization aside). Rows run in order: the transaction rows share
# one transaction.
MATRIX: list[Row] = [
    Row("ApiVersions", (), "NONE", api_versions),
    Row("Produce", (TOPIC_WRITE,), "TOPIC_AUTHORIZATION_FAILED", produce),
    Row("Fetch", (TOPIC_READ,), "TOPIC_AUTHORIZATION_FAILED", fetch),
    Row("ListOffsets", (TOPIC_DESCRIBE,), "TOPIC_AUTHORIZATION_FAILED", list_offsets),
    Row("Metadata (a named topic)", (TOPIC_DESCRIBE,), "TOPIC_AUTHORIZATION_FAILED", metadata_named),
    Row("Metadata (all topics)", (TOPIC_DESCRIBE,), "hidden", metadata_all, allowed="listed"),
    Row("Metadata (auto-creation)", (need(RT.TOPIC, Op.CREATE, AUTO),), "TOPIC_AUTHORIZATION_FAILED",
        metadata_auto_create, given=(need(RT.TOPIC, Op.DESCRIBE, AUTO),)),
    Row("OffsetCommit", (GROUP_READ, TOPIC_READ), "GROUP_AUTHORIZATION_FAILED", offset_commit),
    Row("OffsetCommit (topic)", (TOPIC_READ,), "TOPIC_AUTHORIZATION_FAILED", offset_commit, given=(GROUP_READ,)),
    Row("OffsetFetch", (need(RT.GROUP, Op.DESCRIBE), TOPIC_DESCRIBE), "GROUP_AUTHORIZATION_FAILED", offset_fetch),
    Row("FindCoordinator (group)", (need(RT.GROUP, Op.DESCRIBE),), "GROUP_AUTHORIZATION_FAILED",
        find_group_coordinator),
    Row("FindCoordinator (transaction)", (need(RT.TRANSACTIONAL_ID, Op.DESCRIBE),),
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", find_txn_coordinator),
    Row("JoinGroup", (JOIN_READ,), "GROUP_AUTHORIZATION_FAILED", join_group, allowed="MEMBER_ID_REQUIRED"),
    Row("SyncGroup", (JOIN_READ,), "GROUP_AUTHORIZATION_FAILED", sync_group, allowed="UNKNOWN_MEMBER_ID"),
    Row("Heartbeat", (JOIN_READ,), "GROUP_AUTHORIZATION_FAILED", heartbeat, allowed="UNKNOWN_MEMBER_ID"),
    Row("LeaveGroup", (JOIN_READ,), "GROUP_AUTHORIZATION_FAILED", leave_group, allowed="UNKNOWN_MEMBER_ID"),
    Row("DescribeGroups", (need(RT.GROUP, Op.DESCRIBE),), "GROUP_AUTHORIZATION_FAILED", describe_groups),
    Row("ConsumerGroupHeartbeat", (need(RT.GROUP, Op.READ, CONSUMER_GROUP), TOPIC_DESCRIBE),
        "GROUP_AUTHORIZATION_FAILED", consumer_group_heartbeat),
    Row("ConsumerGroupHeartbeat (subscribed topics)", (TOPIC_DESCRIBE,), "TOPIC_AUTHORIZATION_FAILED",
        consumer_group_heartbeat, given=(need(RT.GROUP, Op.READ, CONSUMER_GROUP),)),
    Row("ConsumerGroupDescribe", (need(RT.GROUP, Op.DESCRIBE),), "GROUP_AUTHORIZATION_FAILED",
        consumer_group_describe, allowed="GROUP_ID_NOT_FOUND"),
    Row("ShareGroupHeartbeat", (need(RT.GROUP, Op.READ, SHARE_GROUP), TOPIC_DESCRIBE),
        "GROUP_AUTHORIZATION_FAILED", share_group_heartbeat),
    Row("ShareGroupHeartbeat (subscribed topics)", (TOPIC_DESCRIBE,), "TOPIC_AUTHORIZATION_FAILED",
        share_group_heartbeat, given=(need(RT.GROUP, Op.READ, SHARE_GROUP),)),
    Row("ShareGroupDescribe", (need(RT.GROUP, Op.DESCRIBE),), "GROUP_AUTHORIZATION_FAILED",
        share_group_describe, allowed="GROUP_ID_NOT_FOUND"),
    Row("StreamsGroupHeartbeat", (need(RT.GROUP, Op.READ, STREAMS_GROUP), TOPIC_DESCRIBE),
        "GROUP_AUTHORIZATION_FAILED", streams_group_heartbeat),
    Row("StreamsGroupHeartbeat (source topics)", (TOPIC_DESCRIBE,), "TOPIC_AUTHORIZATION_FAILED",
        streams_group_heartbeat, given=(need(RT.GROUP, Op.READ, STREAMS_GROUP),)),
    Row("StreamsGroupDescribe", (need(RT.GROUP, Op.DESCRIBE),), "GROUP_AUTHORIZATION_FAILED",
        streams_group_describe, allowed="GROUP_ID_NOT_FOUND"),
    Row("ListGroups", (need(RT.GROUP, Op.DESCRIBE),), "hidden", list_groups, allowed="listed"),
    Row("CreateTopics", (need(RT.TOPIC, Op.CREATE, NEW),), "TOPIC_AUTHORIZATION_FAILED", create_topics),
    Row("DeleteTopics", (need(RT.TOPIC, Op.DELETE, DOOMED),), "TOPIC_AUTHORIZATION_FAILED", delete_topics),
    Row("DeleteRecords", (need(RT.TOPIC, Op.DELETE),), "TOPIC_AUTHORIZATION_FAILED", delete_records),
    Row("InitProducerId (transactional)", (need(RT.TRANSACTIONAL_ID, Op.WRITE, TX_INIT),),
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", init_producer_id_txn),
    Row("InitProducerId (idempotent)", (need(RT.CLUSTER, Op.IDEMPOTENT_WRITE),), "CLUSTER_AUTHORIZATION_FAILED",
        init_producer_id_idempotent),
    Row("InitProducerId (idempotent, by topic)", (TOPIC_WRITE,), "CLUSTER_AUTHORIZATION_FAILED",
        init_producer_id_idempotent),
    Row("OffsetForLeaderEpoch", (TOPIC_DESCRIBE,), "TOPIC_AUTHORIZATION_FAILED", offset_for_leader_epoch),
    Row("AddPartitionsToTxn", (TXN_WRITE, TOPIC_WRITE), "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        add_partitions_to_txn),
    Row("AddPartitionsToTxn (topic)", (TOPIC_WRITE,), "TOPIC_AUTHORIZATION_FAILED", add_partitions_to_txn,
        given=(TXN_WRITE,)),
    Row("Produce (transactional)", (TXN_WRITE, TOPIC_WRITE), "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", produce_txn),
    Row("AddOffsetsToTxn", (TXN_WRITE, GROUP_READ), "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", add_offsets_to_txn),
    Row("AddOffsetsToTxn (group)", (GROUP_READ,), "GROUP_AUTHORIZATION_FAILED", add_offsets_to_txn,
        given=(TXN_WRITE,)),
    Row("TxnOffsetCommit", (TXN_WRITE, GROUP_READ, TOPIC_READ), "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        txn_offset_commit),
    Row("TxnOffsetCommit (group)", (GROUP_READ, TOPIC_READ), "GROUP_AUTHORIZATION_FAILED", txn_offset_commit,
        given=(TXN_WRITE,)),
    Row("DescribeTransactions", (need(RT.TRANSACTIONAL_ID, Op.DESCRIBE),), "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        describe_transactions),
    Row("ListTransactions", (need(RT.TRANSACTIONAL_ID, Op.DESCRIBE),), "hidden", list_transactions,
        allowed="listed"),
    Row("EndTxn", (TXN_WRITE,), "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", end_txn),
    Row("WriteTxnMarkers", (need(RT.CLUSTER, Op.CLUSTER_ACTION),), "CLUSTER_AUTHORIZATION_FAILED",
        write_txn_markers, allowed=ANY_OTHER),
    Row("DescribeProducers", (TOPIC_READ,), "TOPIC_AUTHORIZATION_FAILED", describe_producers),
    Row("DescribeAcls", (need(RT.CLUSTER, Op.DESCRIBE),), "CLUSTER_AUTHORIZATION_FAILED", describe_acls),
    Row("CreateAcls", (need(RT.CLUSTER, Op.ALTER),), "CLUSTER_AUTHORIZATION_FAILED", create_acls),
    Row("DeleteAcls", (need(RT.CLUSTER, Op.ALTER),), "CLUSTER_AUTHORIZATION_FAILED", delete_acls),
    Row("DescribeConfigs (topic)", (need(RT.TOPIC, Op.DESCRIBE_CONFIGS),), "TOPIC_AUTHORIZATION_FAILED",
        describe_topic_configs),
    Row("DescribeConfigs (broker)", (need(RT.CLUSTER, Op.DESCRIBE_CONFIGS),), "CLUSTER_AUTHORIZATION_FAILED",
        describe_broker_configs),
    Row("AlterConfigs (topic)", (need(RT.TOPIC, Op.ALTER_CONFIGS),), "TOPIC_AUTHORIZATION_FAILED",
        alter_topic_configs),
    Row("AlterConfigs (broker)", (need(RT.CLUSTER, Op.ALTER_CONFIGS),), "CLUSTER_AUTHORIZATION_FAILED",
        alter_broker_configs),
    Row("IncrementalAlterConfigs (topic)", (need(RT.TOPIC, Op.ALTER_CONFIGS),), "TOPIC_AUTHORIZATION_FAILED",
        incremental_alter_topic_configs),
    Row("DescribeConfigs (client metrics)", (need(RT.CLUSTER, Op.DESCRIBE_CONFIGS),), "CLUSTER_AUTHORIZATION_FAILED",
        describe_client_metrics_configs),
    Row("IncrementalAlterConfigs (client metrics)", (need(RT.CLUSTER, Op.ALTER_CONFIGS),),
        "CLUSTER_AUTHORIZATION_FAILED", incremental_alter_client_metrics_configs),
    Row("DescribeConfigs (group)", (need(RT.GROUP, Op.DESCRIBE_CONFIGS),), "GROUP_AUTHORIZATION_FAILED",
        describe_group_configs),
    Row("AlterConfigs (group)", (need(RT.GROUP, Op.ALTER_CONFIGS),), "GROUP_AUTHORIZATION_FAILED",
        alter_group_configs),
    Row("IncrementalAlterConfigs (group)", (need(RT.GROUP, Op.ALTER_CONFIGS),), "GROUP_AUTHORIZATION_FAILED",
        incremental_alter_group_configs),
    Row("ListConfigResources", (need(RT.CLUSTER, Op.DESCRIBE_CONFIGS),), "CLUSTER_AUTHORIZATION_FAILED",
        list_config_resources),
    Row("AlterReplicaLogDirs", (need(RT.CLUSTER, Op.ALTER),), "CLUSTER_AUTHORIZATION_FAILED",
        alter_replica_log_dirs, allowed=ANY_OTHER),
    Row("DescribeLogDirs", (need(RT.CLUSTER, Op.DESCRIBE),), "CLUSTER_AUTHORIZATION_FAILED", describe_log_dirs),
    Row("CreatePartitions", (need(RT.TOPIC, Op.ALTER),), "TOPIC_AUTHORIZATION_FAILED", create_partitions),
    Row("DeleteGroups", (need(RT.GROUP, Op.DELETE, DOOMED_GROUP),), "GROUP_AUTHORIZATION_FAILED", delete_groups),
    Row("OffsetDelete", (need(RT.GROUP, Op.DELETE), TOPIC_READ), "GROUP_AUTHORIZATION_FAILED", offset_delete),
    Row("DescribeClientQuotas", (need(RT.CLUSTER, Op.DESCRIBE_CONFIGS),), "CLUSTER_AUTHORIZATION_FAILED",
        describe_client_quotas),
    Row("AlterClientQuotas", (need(RT.CLUSTER, Op.ALTER_CONFIGS),), "CLUSTER_AUTHORIZATION_FAILED",
        alter_client_quotas),
    Row("DescribeCluster (authorized operations)", (need(RT.CLUSTER, Op.DESCRIBE),), "no operations",
        describe_cluster, allowed="operations reported"),
    Row("DescribeTopicPartitions", (TOPIC_DESCRIBE,), "TOPIC_AUTHORIZATION_FAILED", describe_topic_partitions),
    Row("DescribeUserScramCredentials", (need(RT.CLUSTER, Op.DESCRIBE),), "CLUSTER_AUTHORIZATION_FAILED",
        describe_scram),
    Row("AlterUserScramCredentials", (need(RT.CLUSTER, Op.ALTER),), "CLUSTER_AUTHORIZATION_FAILED", alter_scram),
    Row("UpdateFeatures", (need(RT.CLUSTER, Op.ALTER),), "CLUSTER_AUTHORIZATION_FAILED", update_features),
    Row("CreateDelegationToken (another owner)", (Need(RT.USER, Op.CREATE_TOKENS, "User:bob"),),
        "DELEGATION_TOKEN_AUTHORIZATION_FAILED", create_token_for_another),
    Row("DescribeDelegationToken (another's)", (Need(RT.USER, Op.DESCRIBE_TOKENS, "User:admin"),), "hidden",
        describe_others_tokens, allowed="listed"),
    Row("LeaderAndIsr", (CLUSTER_ACTION,), "CLUSTER_AUTHORIZATION_FAILED", leader_and_isr, ANY_OTHER, cluster=True),
    Row("UpdateMetadata", (CLUSTER_ACTION,), "CLUSTER_AUTHORIZATION_FAILED", update_metadata, ANY_OTHER,
        cluster=True),
    Row("StopReplica", (CLUSTER_ACTION,), "CLUSTER_AUTHORIZATION_FAILED", stop_replica, ANY_OTHER, cluster=True),
    Row("ControlledShutdown", (CLUSTER_ACTION,), "CLUSTER_AUTHORIZATION_FAILED", controlled_shutdown, ANY_OTHER,
        cluster=True),
    Row("AlterPartition", (CLUSTER_ACTION,), "CLUSTER_AUTHORIZATION_FAILED", alter_partition, ANY_OTHER,
        cluster=True),
    Row("Fetch (from a follower)", (CLUSTER_ACTION,), "TOPIC_AUTHORIZATION_FAILED", follower_fetch, ANY_OTHER,
        cluster=True),
    Row("AddPartitionsToTxn (brokers' v4+)", (CLUSTER_ACTION,), "CLUSTER_AUTHORIZATION_FAILED",
        add_partitions_to_txn_verify, cluster=True),
    Row("ElectLeaders", (need(RT.CLUSTER, Op.ALTER),), "CLUSTER_AUTHORIZATION_FAILED", elect_leaders),
    Row("AlterPartitionReassignments", (need(RT.CLUSTER, Op.ALTER),), "CLUSTER_AUTHORIZATION_FAILED",
        alter_reassignments),
    Row("ListPartitionReassignments", (need(RT.CLUSTER, Op.DESCRIBE),), "CLUSTER_AUTHORIZATION_FAILED",
        list_reassignments),
]


# ------------------------------------------------------------------ the broker and its state
def _binding(n: Need) -> AclBinding:
    return AclBinding(ResourcePattern(n.resource_type, n.name, PatternType.LITERAL),
                      AccessControlEntry(PRINCIPAL, "*", n.operation, AclPermissionType.ALLOW))


@pytest.fixture(scope="module")
def secured_broker():
    b = BrokerProcess({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                       "super.users": "User:admin", "num.partitions": "2", "sasl.enabled.mechanisms": "PLAIN",
                       "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
                       "delegation.token.secret.key": "acl-matrix",
                       # Members and transactions the permitted rows leave behind must outlast the
                       # matrix, or their expiry changes the state a later row is checked against.
                       **{f"group.{kind}.{bound}session.timeout.ms": "600000"
                          for kind in ("consumer", "share", "streams") for bound in ("", "max.")},
                       "group.streams.initial.rebalance.delay.ms": "0"})
    b.overrides["listeners"] = f"SASL_PLAINTEXT://127.0.0.1:{b.port}"
    yield b.start()
    b.cleanup()


async def _connect(port: int, who: SaslCredentials) -> BrokerConnection:
    return await BrokerConnection("127.0.0.1", port, sasl=who).connect(10)


async def _setup(admin: BrokerConnection) -> None:
    r = await admin.send(ctq.CreateTopicsRequest(topics=[
        ctq.CreatableTopic(name=n, num_partitions=2, replication_factor=1, assignments=[], configs=[])
        for n in (T, DOOMED)], timeout_ms=5000, validate_only=False))
    assert [t.error_code for t in r.topics] == [0, 0]
    # As a client would first: a new broker makes __consumer_offsets and __transaction_state then.
    await find_coordinator(admin, G)
    await find_coordinator(admin, TX, core.TRANSACTION)
    for group in (G, DOOMED_GROUP):
        r = await admin.send(ocq.OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            topics=[ocq.OffsetCommitRequestTopic(name=T, partitions=[ocq.OffsetCommitRequestPartition(
                partition_index=1, committed_offset=0, committed_leader_epoch=-1, committed_metadata="")])]),
            version=8)
        assert r.topics[0].partitions[0].error_code == 0


async def _init_transaction(c: Ctx) -> None:
    while True:
        r = await c.admin.send(ipq.InitProducerIdRequest(transactional_id=TX, transaction_timeout_ms=600000,
                                                         producer_id=-1, producer_epoch=-1))
        if r.error_code not in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS,
                                ErrorCode.COORDINATOR_NOT_AVAILABLE):
            break
        await asyncio.sleep(0.1)
    assert r.error_code == 0
    c.pid, c.epoch = r.producer_id, r.producer_epoch


async def _state(admin: BrokerConnection) -> Any:
    """Everything an unauthorized request could have changed, as the administrator sees it."""
    md = await admin.send(mq.MetadataRequest(topics=None, allow_auto_topic_creation=False))
    # __share_group_state is made on first use, after an allowed ShareGroupHeartbeat: the share
    # state of its partitions is initialized in the background (as Kafka's), so it may appear
    # during a later row. Its making is not that row's doing.
    topics = sorted((t.name, len(t.partitions)) for t in md.topics if t.name != "__share_group_state")
    offsets = []
    for ts in (-1, -2):
        r = await admin.send(loq.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[loq.ListOffsetsTopic(
            name=T, partitions=[loq.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=ts)
                                for p in (0, 1)])]))
        offsets.append([p.offset for p in r.topics[0].partitions])
    committed = []
    for group in (G, DOOMED_GROUP):
        r = await admin.send(ofq.OffsetFetchRequest(group_id=group, topics=None), version=7)
        committed.append((r.error_code, sorted((t.name, p.partition_index, p.committed_offset)
                                               for t in r.topics for p in t.partitions)))
    cfg = await admin.send(dcfq.DescribeConfigsRequest(resources=[
        dcfq.DescribeConfigsResource(resource_type=2, resource_name=T, configuration_keys=None),
        dcfq.DescribeConfigsResource(resource_type=4, resource_name="1", configuration_keys=None)]))
    configs = [sorted((c.name, c.value) for c in res.configs) for res in cfg.results]
    acls = await admin.send(dsaq.DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None,
                                                     pattern_type_filter=1, principal_filter=None, host_filter=None,
                                                     operation=1, permission_type=1))
    quotas = await admin.send(dcqq.DescribeClientQuotasRequest(components=[], strict=False))
    groups = await admin.send(lgrq.ListGroupsRequest(states_filter=[], types_filter=[]))
    txns = await admin.send(dtxq.DescribeTransactionsRequest(transactional_ids=[TX, TX_INIT]))
    scram = await admin.send(dusq.DescribeUserScramCredentialsRequest(users=None))
    return (sorted((u.user, tuple((i.mechanism, i.iterations) for i in u.credential_infos)) for u in scram.results),
            topics, offsets, committed, configs,
            sorted((r.resource_type, r.resource_name, a.principal, a.host, a.operation)
                   for r in acls.resources for a in r.acls),
            sorted((tuple((e.entity_type, e.entity_name) for e in q.entity), tuple((v.key, v.value) for v in q.values))
                   for q in quotas.entries or ()),
            sorted((g.group_id, g.group_state) for g in groups.groups),
            [(t.transaction_state, t.producer_epoch, sorted((x.topic, tuple(x.partitions)) for x in t.topics))
             for t in txns.transaction_states])


async def _set_acls(admin: BrokerConnection, needs: tuple[Need, ...]) -> None:
    """The principal under test gets exactly ``needs``, nothing else."""
    r = await admin.send(daq.DeleteAclsRequest(filters=[daq.DeleteAclsFilter(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=PRINCIPAL,
        host_filter=None, operation=1, permission_type=1)]))
    assert r.filter_results[0].error_code == 0
    if needs:
        r = await admin.send(caq.CreateAclsRequest(creations=[caq.AclCreation(
            resource_type=int(b.pattern.resource_type), resource_name=b.pattern.name, resource_pattern_type=3,
            principal=b.entry.principal, host=b.entry.host, operation=int(b.entry.operation),
            permission_type=int(b.entry.permission_type)) for b in (_binding(n) for n in needs)]))
        assert [x.error_code for x in r.results] == [0] * len(needs)


async def _run_rows(ctx: Ctx, rows: list[Row], state: Callable[[BrokerConnection], Awaitable[Any]]) -> list[str]:
    """Each row without its permissions (the expected refusal, and ``state`` unchanged), then
    with them; what went otherwise."""
    failures = []
    for row in rows:
        await _set_acls(ctx.admin, row.given)
        before = await state(ctx.admin)
        denied = await row.call(ctx)
        if denied != row.denied:
            failures.append(f"{row.api} without {row.needs}: {denied}, expected {row.denied}")
        after = await state(ctx.admin)
        if after != before:
            changed = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
            failures.append(f"{row.api} without {row.needs} changed the broker's state: {changed}")
        await _set_acls(ctx.admin, row.given + row.needs)
        allowed = await row.call(ctx)
        if allowed != row.allowed and not (row.allowed == ANY_OTHER and allowed not in AUTH_ERRORS):
            failures.append(f"{row.api} with {row.needs}: {allowed}, expected {row.allowed}")
    return failures


def test_acl_matrix(secured_broker):
    async def main() -> list[str]:
        admin = await _connect(secured_broker.port, ADMIN)
        user = await _connect(secured_broker.port, USER)
        ctx = Ctx(user, admin)
        try:
            await _setup(admin)
            await _init_transaction(ctx)
            failures = await _run_rows(ctx, [r for r in MATRIX if not r.cluster], _state)
            await _set_acls(admin, ())
        finally:
            await user.close()
            await admin.close()
        return failures

    assert asyncio.run(main()) == []


async def _cluster_state(admin: BrokerConnection) -> Any:
    """What the brokers' and the controller's requests could change: leaders, epochs, ISRs,
    the brokers, reassignments."""
    md = await admin.send(mq.MetadataRequest(topics=None, allow_auto_topic_creation=False))
    reassignments = await admin.send(lpraq.ListPartitionReassignmentsRequest(timeout_ms=5000, topics=None))
    return (sorted((b.node_id, b.port) for b in md.brokers), md.controller_id,
            sorted((t.name, p.partition_index, p.leader_id, p.leader_epoch, tuple(p.isr_nodes))
                   for t in md.topics for p in t.partitions),
            reassignments.error_code, [(t.name, len(t.partitions)) for t in reassignments.topics])


def test_acl_matrix_cluster_mode(zk_connect):
    """The cluster-mode rows, on a ZooKeeper-mode broker whose inter-broker listener is an
    internal PLAINTEXT one (its anonymous principal a super user, as brokers' own must be)."""
    sasl_port = free_port()
    b = BrokerProcess({
        "zookeeper.connect": zk_connect, "broker.id": "1", "offsets.topic.replication.factor": "1",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS", "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS, "inter.broker.listener.name": "PLAINTEXT"})
    b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    b.start()

    async def main() -> list[str]:
        admin = await _connect(sasl_port, ADMIN)
        user = await _connect(sasl_port, USER)
        ctx = Ctx(user, admin)
        try:
            r = await admin.send(ctq.CreateTopicsRequest(topics=[ctq.CreatableTopic(
                name=T, num_partitions=1, replication_factor=1, assignments=[], configs=[])], timeout_ms=5000,
                validate_only=False))
            assert r.topics[0].error_code == 0
            while not (await _cluster_state(admin))[2]:
                await asyncio.sleep(0.1)  # until the controller made the partition
            failures = await _run_rows(ctx, [r for r in MATRIX if r.cluster], _cluster_state)
        finally:
            await user.close()
            await admin.close()
        return failures

    try:
        assert asyncio.run(main()) == []
    finally:
        b.cleanup()


# ------------------------------------------------------------------ the table in docs/security.md
DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
START, END = "<!-- acl-matrix:start -->", "<!-- acl-matrix:end -->"


def render_matrix() -> str:
    lines = ["| API | needs | without it |", "|---|---|---|"]
    for row in MATRIX:
        needs = ", ".join(str(n) for n in row.needs) or "nothing"
        if row.given:
            needs += " (given " + ", ".join(str(n) for n in row.given) + ")"
        api = f"{row.api} (cluster mode)" if row.cluster else row.api
        lines.append(f"| {api} | {needs} | {row.denied} |")
    return "\n".join(lines)


@pytest.mark.fast
def test_doc_has_the_matrix():
    text = DOC.read_text()
    table = text.split(START, 1)[1].split(END, 1)[0].strip()
    assert table == render_matrix(), "docs/security.md's ACL matrix differs from the test's MATRIX"
