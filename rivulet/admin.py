"""Admin client with confluent-kafka's shape (``from rivulet.admin import AdminClient, NewTopic``)."""

from rivulet.client.admin import (
    AdminClient,
    AlterConfigOpType,
    AsyncAdminClient,
    ClientQuotaAlteration,
    ClientQuotaAlterationOp,
    ClientQuotaEntity,
    ClientQuotaFilter,
    ClientQuotaFilterComponent,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    DeletedRecords,
    ListConsumerGroupsResult,
    ListOffsetsResultInfo,
    MemberAssignment,
    MemberDescription,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from rivulet.client.types import ClusterMetadata, TopicMetadata, PartitionMetadata, BrokerMetadata

__all__ = [
    "AdminClient", "AsyncAdminClient", "NewTopic", "NewPartitions", "ConfigResource", "ConfigEntry", "ConfigSource",
    "ResourceType", "AlterConfigOpType", "OffsetSpec", "ListOffsetsResultInfo", "DeletedRecords",
    "ConsumerGroupListing", "ConsumerGroupDescription", "ConsumerGroupState", "ConsumerGroupTopicPartitions",
    "ListConsumerGroupsResult", "MemberAssignment", "MemberDescription", "ClusterMetadata", "TopicMetadata",
    "PartitionMetadata", "BrokerMetadata", "ClientQuotaEntity", "ClientQuotaFilter", "ClientQuotaFilterComponent",
    "ClientQuotaAlteration", "ClientQuotaAlterationOp",
]
