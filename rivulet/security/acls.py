"""ACL bindings and filters (Kafka's AclBinding, AclBindingFilter, ResourcePattern): the
codes the wire carries, the names the tools and ZooKeeper use, and Kafka's validation of a
new binding and of a filter."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Iterable, Mapping, TypeVar

from rivulet.protocol.errors import ApiError, ErrorCode


WILDCARD = "*"
_E = TypeVar("_E", bound="_Named")
CLUSTER_NAME = "kafka-cluster"


class _Named(IntEnum):
    """An enum whose wire code is its value and whose name Kafka spells in PascalCase
    (``TransactionalId``, ``DescribeConfigs``) in ZooKeeper and in the tools."""

    @property
    def pascal(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def parse(cls: type[_E], text: str) -> _E:
        """From ``TRANSACTIONAL_ID``, ``transactional-id`` or ``TransactionalId``."""
        key = text.replace("-", "").replace("_", "").upper()
        for member in cls:
            if member.name.replace("_", "") == key:
                return member
        raise ValueError(f"unknown {cls.__name__} '{text}'")

    @classmethod
    def of(cls: type[_E], code: int) -> _E:
        try:
            return cls(code)
        except ValueError:
            return cls(0)  # UNKNOWN, as Kafka reads a code it does not know


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Named):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


Op = AclOperation
# What an ACL of each resource type may grant (besides ALL); also the operations that
# authorized-operations bitfields report.
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                                   Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                                     Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({Op.DESCRIBE, Op.WRITE, Op.TWO_PHASE_COMMIT}),
    ResourceType.DELEGATION_TOKEN: frozenset({Op.DESCRIBE}),
    ResourceType.USER: frozenset({Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS}),
}


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, " \
               f"patternType={self.pattern_type.name})"


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def validate(self) -> None:
        """Refuse what Kafka 4.3's CreateAcls refuses (INVALID_REQUEST), in its order: the
        broker's checks of the resource name, then its controller's of the binding. Kafka
        accepts any operation on any resource type, any host, and any principal with a colon."""
        p, e = self.pattern, self.entry
        if p.resource_type is ResourceType.CLUSTER and p.name != CLUSTER_NAME:
            raise ApiError(ErrorCode.INVALID_REQUEST,
                           f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        if not p.name:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Invalid empty resource name")
        if p.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Invalid resourceType {p.resource_type.name}")
        if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Invalid patternType {p.pattern_type.name}")
        if e.operation in (Op.ANY, Op.UNKNOWN):
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Invalid operation {e.operation.name}")
        if e.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Invalid permissionType {e.permission_type.name}")
        if ":" not in e.principal:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Could not parse principal from `{e.principal}` (no colon "
                           "is present separating the principal type from the principal name)")

    def to_filter(self) -> AclBindingFilter:
        """The filter that matches this binding alone (Kafka's ``AclBinding.toFilter``)."""
        p, e = self.pattern, self.entry
        return AclBindingFilter(p.resource_type, p.name, p.pattern_type, e.principal, e.host, e.operation,
                                e.permission_type)


# What one request changes of a pattern's entries: (added, removed).
AclChange = tuple[frozenset[AccessControlEntry], frozenset[AccessControlEntry]]


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """None for a name, principal or host matches any; ANY for the enums."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = Op.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def validate(self) -> None:
        """Kafka's check of a DeleteAcls filter (INVALID_REQUEST): a type, pattern type, operation
        or permission type whose code Kafka does not know. Names, principals and hosts are
        compared as they are, so a principal that is not ``Type:name`` (``*``) matches nothing."""
        if self.resource_type is ResourceType.UNKNOWN or self.pattern_type is PatternType.UNKNOWN:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Unknown patternFilter.")
        if self.operation is AclOperation.UNKNOWN or self.permission_type is AclPermissionType.UNKNOWN:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Unknown entryFilter.")

    def matches_pattern(self, p: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type != p.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != p.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, p.pattern_type):
            return self.name == p.name
        # MATCH: every pattern that would apply to a resource of this name
        if p.pattern_type is PatternType.LITERAL:
            return self.name == p.name or p.name == WILDCARD
        return p.pattern_type is PatternType.PREFIXED and self.name.startswith(p.name)

    def matches_entry(self, e: AccessControlEntry) -> bool:
        return (self.principal is None or self.principal == e.principal) and \
            (self.host is None or self.host == e.host) and \
            (self.operation is Op.ANY or self.operation == e.operation) and \
            (self.permission_type is AclPermissionType.ANY or self.permission_type == e.permission_type)

    def matches(self, b: AclBinding) -> bool:
        return self.matches_pattern(b.pattern) and self.matches_entry(b.entry)


# ------------------------------------------------------------ from the wire's codes
def binding_of(resource_type: int, name: str, pattern_type: int, principal: str, host: str, operation: int,
               permission_type: int) -> AclBinding:
    """A binding as CreateAcls and the ACL responses carry it (a code Kafka does not know: UNKNOWN)."""
    return AclBinding(ResourcePattern(ResourceType.of(resource_type), name, PatternType.of(pattern_type)),
                      AccessControlEntry(principal, host, AclOperation.of(operation),
                                         AclPermissionType.of(permission_type)))


def filter_of(resource_type: int, name: str | None, pattern_type: int, principal: str | None, host: str | None,
              operation: int, permission_type: int) -> AclBindingFilter:
    """A filter as DescribeAcls and DeleteAcls carry it."""
    return AclBindingFilter(ResourceType.of(resource_type), name, PatternType.of(pattern_type), principal, host,
                            AclOperation.of(operation), AclPermissionType.of(permission_type))


def unbuildable(b: AclBinding) -> bool:
    """A creation Kafka cannot even make a binding of (its ResourcePattern and AccessControlEntry
    refuse ANY, and MATCH): it fails the whole CreateAcls request, UNKNOWN_SERVER_ERROR for
    every creation, before any is validated."""
    p, e = b.pattern, b.entry
    return p.resource_type is ResourceType.ANY or p.pattern_type in (PatternType.ANY, PatternType.MATCH) or \
        e.operation is Op.ANY or e.permission_type is AclPermissionType.ANY


def names_unknown(resource_type: int, pattern_type: int, operation: int, permission_type: int) -> bool:
    """An ACL request element spelled with the code of UNKNOWN (0): Kafka cannot parse such a
    Create/Describe/DeleteAcls request and closes the connection. Other codes it does not know
    read as UNKNOWN and match nothing."""
    return 0 in (resource_type, pattern_type, operation, permission_type)


# ------------------------------------------------------------ Kafka's ZooKeeper JSON
def entries_to_json(entries: Iterable[AccessControlEntry]) -> dict[str, object]:
    """The document of one resource pattern's znode (``{"version":1,"acls":[...]}``), sorted so
    that equal sets write equal bytes."""
    acls = [{"principal": e.principal, "permissionType": e.permission_type.pascal,
             "operation": e.operation.pascal, "host": e.host} for e in entries]
    return {"version": 1, "acls": sorted(acls, key=lambda a: (a["principal"], a["host"], a["operation"],
                                                              a["permissionType"]))}


def entries_from_json(doc: Mapping[str, object]) -> set[AccessControlEntry]:
    acls = doc.get("acls") or []
    assert isinstance(acls, list)
    return {AccessControlEntry(str(a["principal"]), str(a["host"]), AclOperation.parse(str(a["operation"])),
                               AclPermissionType.parse(str(a["permissionType"])))
            for a in acls}


def bindings_to_json(bindings: Iterable[AclBinding]) -> list[dict[str, object]]:
    """Every binding, one document per resource pattern (the broker's metadata on one node)."""
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    return [{"resourceType": p.resource_type.pascal, "name": p.name, "patternType": p.pattern_type.name,
             **entries_to_json(entries)}
            for p, entries in sorted(by_pattern.items(), key=lambda kv: (kv[0].resource_type, kv[0].name,
                                                                         kv[0].pattern_type))]


def bindings_from_json(docs: Iterable[Mapping[str, object]]) -> list[AclBinding]:
    out = []
    for d in docs:
        pattern = ResourcePattern(ResourceType.parse(str(d["resourceType"])), str(d["name"]),
                                  PatternType.parse(str(d["patternType"])))
        out.extend(AclBinding(pattern, e) for e in entries_from_json(d))
    return out
