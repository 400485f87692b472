"""The authorizer, with the semantics of Kafka's StandardAuthorizer: an in-memory cache of ACL
bindings that every request is checked against.

A request is allowed when the principal is a super user; otherwise the ACLs that apply to
the resource are those on its exact name, on the literal wildcard ``*`` and on every prefix
of its name. With none, ``allow.everyone.if.no.acl.found`` decides. A DENY that matches the
principal (or ``User:*``), the host (or ``*``) and the operation (or ALL) wins over any
ALLOW; an ALLOW of DESCRIBE is also given by READ, WRITE, DELETE or ALTER, and one of
DESCRIBE_CONFIGS by ALTER_CONFIGS. Where the bindings are kept is the caller's business
(the broker's metadata on one node, ZooKeeper in a cluster): this class only holds them.
"""

from __future__ import annotations

from typing import Iterable

from rivulet.security.acls import SUPPORTED_OPERATIONS, WILDCARD, AccessControlEntry, AclBinding, AclBindingFilter
from rivulet.security.acls import AclOperation as Op, AclPermissionType as Perm, PatternType, ResourcePattern
from rivulet.security.acls import ResourceType
from rivulet.security.principal import KafkaPrincipal

# The class names Kafka's brokers take for ``authorizer.class.name``: either enables this one.
AUTHORIZER_CLASS_NAMES = frozenset({
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
})
WILDCARD_PRINCIPAL = "User:*"

# An ALLOW of the key also grants these (Kafka's implied operations).
_IMPLIED_BY: dict[Op, frozenset[Op]] = {
    Op.DESCRIBE: frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL}),
    Op.DESCRIBE_CONFIGS: frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.ALL}),
}
# authorize_by_resource_type first asks about a resource of this name, as Kafka does, so that
# super users, a wildcard ALLOW and allow.everyone.if.no.acl.found give their usual answer.
_PROBE_NAME = "hardcode"


def parse_super_users(value: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (``User:admin;User:ops``)."""
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())


class StandardAuthorizer:
    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls: dict[ResourcePattern, set[AccessControlEntry]] = {}

    # ------------------------------------------------------------ the cache
    def bindings(self) -> list[AclBinding]:
        return [AclBinding(p, e) for p, entries in self._acls.items() for e in entries]

    def add(self, binding: AclBinding) -> None:
        self._acls.setdefault(binding.pattern, set()).add(binding.entry)

    def remove(self, binding: AclBinding) -> None:
        entries = self._acls.get(binding.pattern)
        if entries is not None:
            entries.discard(binding.entry)
            if not entries:
                del self._acls[binding.pattern]

    def entries(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return frozenset(self._acls.get(pattern, ()))

    def replace(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Set the entries of one pattern (a ZooKeeper change notification brings them whole)."""
        new = set(entries)
        if new:
            self._acls[pattern] = new
        else:
            self._acls.pop(pattern, None)

    def matching(self, f: AclBindingFilter) -> list[AclBinding]:
        return [AclBinding(p, e) for p, entries in self._acls.items() if f.matches_pattern(p)
                for e in entries if f.matches_entry(e)]

    # ------------------------------------------------------------ decisions
    def _applicable(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        found: list[AccessControlEntry] = []
        for literal in {name, WILDCARD}:
            found.extend(self._acls.get(ResourcePattern(resource_type, literal, PatternType.LITERAL), ()))
        for i in range(1, len(name) + 1):
            found.extend(self._acls.get(ResourcePattern(resource_type, name[:i], PatternType.PREFIXED), ()))
        return found

    def authorize(self, principal: KafkaPrincipal, host: str, operation: Op, resource_type: ResourceType,
                  name: str) -> bool:
        if str(principal) in self.super_users:
            return True
        entries = self._applicable(resource_type, name)
        if not entries:
            return self.allow_everyone_if_no_acl_found
        principals = {str(principal), WILDCARD_PRINCIPAL}
        granting = _IMPLIED_BY.get(operation, frozenset({operation, Op.ALL}))
        allowed = False
        for e in entries:
            if e.principal not in principals or e.host not in (host, WILDCARD):
                continue
            if e.permission_type is Perm.DENY and e.operation in (operation, Op.ALL):
                return False
            if e.permission_type is Perm.ALLOW and e.operation in granting:
                allowed = True
        return allowed

    def authorized_operations(self, principal: KafkaPrincipal, host: str, resource_type: ResourceType,
                              name: str) -> set[Op]:
        return {op for op in SUPPORTED_OPERATIONS[resource_type]
                if self.authorize(principal, host, op, resource_type, name)}

    def authorize_by_resource_type(self, principal: KafkaPrincipal, host: str, operation: Op,
                                   resource_type: ResourceType) -> bool:
        """Whether the principal may do ``operation`` on some resource of the type (Kafka's
        authorizeByResourceType: an ALLOW, literal or prefixed, that no DENY covers)."""
        if self.authorize(principal, host, operation, resource_type, _PROBE_NAME):
            return True
        principals = {str(principal), WILDCARD_PRINCIPAL}
        deny_literals: set[str] = set()
        deny_prefixes: set[str] = set()
        allow_literals: set[str] = set()
        allow_prefixes: set[str] = set()
        wildcard_allow = False
        for pattern, entries in self._acls.items():
            if pattern.resource_type != resource_type:
                continue
            for e in entries:
                if e.principal not in principals or e.host not in (host, WILDCARD) or \
                        e.operation not in (operation, Op.ALL):
                    continue
                literal = pattern.pattern_type is PatternType.LITERAL
                if e.permission_type is Perm.DENY:
                    if literal and pattern.name == WILDCARD:
                        return False
                    (deny_literals if literal else deny_prefixes).add(pattern.name)
                elif literal and pattern.name == WILDCARD:
                    wildcard_allow = True
                else:
                    (allow_literals if literal else allow_prefixes).add(pattern.name)

        def denied_by_prefix(name: str) -> bool:
            return any(name.startswith(d) for d in deny_prefixes)

        if wildcard_allow or any(not denied_by_prefix(p) for p in allow_prefixes):
            return True
        return any(n not in deny_literals and not denied_by_prefix(n) for n in allow_literals)
