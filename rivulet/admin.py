"""Admin client with confluent-kafka's shape (``from rivulet.admin import AdminClient, NewTopic``)."""

from rivulet.client.admin.client import (
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
# ACL bindings and filters for create_acls, describe_acls and delete_acls
from rivulet.security.acls import AccessControlEntry, AclBinding, AclBindingFilter, AclOperation  # noqa: I001
from rivulet.security.acls import AclPermissionType, PatternType, ResourcePattern
from rivulet.client.types import ClusterMetadata, TopicMetadata, PartitionMetadata, BrokerMetadata

__all__ = [
    "AdminClient", "AsyncAdminClient", "NewTopic", "NewPartitions", "ConfigResource", "ConfigEntry", "ConfigSource",
    "ResourceType", "AlterConfigOpType", "OffsetSpec", "ListOffsetsResultInfo", "DeletedRecords",
    "ConsumerGroupListing", "ConsumerGroupDescription", "ConsumerGroupState", "ConsumerGroupTopicPartitions",
    "ListConsumerGroupsResult", "MemberAssignment", "MemberDescription", "ClusterMetadata", "TopicMetadata",
    "PartitionMetadata", "BrokerMetadata", "ClientQuotaEntity", "ClientQuotaFilter", "ClientQuotaFilterComponent",
    "ClientQuotaAlteration", "ClientQuotaAlterationOp", "AccessControlEntry", "AclBinding", "AclBindingFilter",
    "AclOperation", "AclPermissionType", "PatternType", "ResourcePattern",
]
