"""The broker's side of authorization: ``Authz``, the one check every request handler is given
(who the connection is, from where, against the authorizer), and ``AclManager``, which
changes the ACLs (CreateAcls, DeleteAcls) and keeps them where they survive a restart.

With no ``authorizer.class.name`` there is no authorizer: every check passes and the ACL
APIs answer SECURITY_DISABLED, as Kafka's.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Protocol, Sequence

from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.security.acls import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclChange,
    AclOperation,
    ResourcePattern,
    ResourceType,
)
from rivulet.security.authorizer import StandardAuthorizer, parse_super_users
from rivulet.server.config import BrokerConfig
from rivulet.server.network import KafkaConnection

# What authorized-operations fields hold when they were not asked for (Kafka's Int.MinValue).
OPERATIONS_NOT_REQUESTED = -2147483648
NO_AUTHORIZER = "No Authorizer is configured on the broker"


def build_authorizer(config: BrokerConfig) -> StandardAuthorizer | None:
    if not config["authorizer.class.name"]:
        return None
    return StandardAuthorizer(parse_super_users(config["super.users"]), config["allow.everyone.if.no.acl.found"])


def operations_bitfield(ops: Iterable[AclOperation]) -> int:
    """Kafka's authorized-operations encoding: bit ``code`` set for each operation."""
    bits = 0
    for op in ops:
        bits |= 1 << int(op)
    return bits


class Authz:
    """Every authorization decision of the request handlers goes through here."""

    def __init__(self, authorizer: StandardAuthorizer | None) -> None:
        self.authorizer = authorizer

    def authorize(self, conn: KafkaConnection, op: AclOperation, resource_type: ResourceType, name: str) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(conn.principal, conn.peer[0], op, resource_type, name)

    def cluster(self, conn: KafkaConnection, op: AclOperation) -> bool:
        return self.authorize(conn, op, ResourceType.CLUSTER, CLUSTER_NAME)

    def topic(self, conn: KafkaConnection, op: AclOperation, name: str) -> bool:
        return self.authorize(conn, op, ResourceType.TOPIC, name)

    def group(self, conn: KafkaConnection, op: AclOperation, name: str) -> bool:
        return self.authorize(conn, op, ResourceType.GROUP, name)

    def transactional_id(self, conn: KafkaConnection, op: AclOperation, name: str) -> bool:
        return self.authorize(conn, op, ResourceType.TRANSACTIONAL_ID, name)

    def allowed(self, conn: KafkaConnection, op: AclOperation, resource_type: ResourceType,
                names: Iterable[str]) -> set[str]:
        """The names among ``names`` the connection may do ``op`` on (each decided once)."""
        return {n for n in set(names) if self.authorize(conn, op, resource_type, n)}

    def by_resource_type(self, conn: KafkaConnection, op: AclOperation, resource_type: ResourceType) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize_by_resource_type(conn.principal, conn.peer[0], op, resource_type)

    def operations(self, conn: KafkaConnection, resource_type: ResourceType, name: str) -> int:
        """The authorized-operations bitfield of a resource (every supported one without an authorizer)."""
        if self.authorizer is None:
            return operations_bitfield(SUPPORTED_OPERATIONS[resource_type])
        return operations_bitfield(self.authorizer.authorized_operations(
            conn.principal, conn.peer[0], resource_type, name))


def _invalid(item: AclBinding | AclBindingFilter) -> ApiError | None:
    try:
        item.validate()
    except ApiError as e:
        return e
    return None


class AclStore(Protocol):
    """Where ACLs are kept: the broker's metadata on one node, ZooKeeper in a cluster."""

    def load_acls(self) -> list[AclBinding]: ...

    async def store_acls(self, changes: Mapping[ResourcePattern, AclChange], bindings: Sequence[AclBinding]) -> None:
        """Persist ``changes``; ``bindings`` are every ACL as this broker has them once they apply."""


class AclManager:
    """CreateAcls, DescribeAcls and DeleteAcls against the authorizer's cache and the store."""

    def __init__(self, authorizer: StandardAuthorizer | None, store: AclStore | None) -> None:
        self.authorizer = authorizer
        self.store = store
        if authorizer is not None and store is not None:
            for b in store.load_acls():
                authorizer.add(b)

    def _require(self) -> StandardAuthorizer:
        if self.authorizer is None:
            raise ApiError(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
        return self.authorizer

    async def create(self, bindings: Sequence[AclBinding]) -> list[ApiError | None]:
        authorizer = self._require()
        results = [_invalid(b) for b in bindings]
        await self._apply(authorizer, [b for b, refused in zip(bindings, results) if refused is None], [])
        return results

    def describe(self, f: AclBindingFilter) -> list[AclBinding]:
        # Kafka describes by any filter: what it cannot match simply matches nothing.
        return self._require().matching(f)

    async def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding] | ApiError]:
        authorizer = self._require()
        results: list[list[AclBinding] | ApiError] = []
        for f in filters:
            refused = _invalid(f)
            results.append(refused if refused is not None else authorizer.matching(f))
        removed = [b for r in results if not isinstance(r, ApiError) for b in r]
        await self._apply(authorizer, [], removed)
        return results

    async def _apply(self, authorizer: StandardAuthorizer, added: Sequence[AclBinding],
                     removed: Sequence[AclBinding]) -> None:
        """Apply at once to this broker's cache (no await between deciding and applying), then
        persist; the store may bring back what another broker changed meanwhile."""
        changes: dict[ResourcePattern, tuple[set[AccessControlEntry], set[AccessControlEntry]]] = {}
        for b in added:
            changes.setdefault(b.pattern, (set(), set()))[0].add(b.entry)
        for b in removed:
            changes.setdefault(b.pattern, (set(), set()))[1].add(b.entry)
        if not changes:
            return
        for pattern, (plus, minus) in changes.items():
            authorizer.replace(pattern, (authorizer.entries(pattern) | plus) - minus)
        if self.store is not None:
            await self.store.store_acls({p: (frozenset(a), frozenset(r)) for p, (a, r) in changes.items()},
                                        authorizer.bindings())
