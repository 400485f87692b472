"""`rivulet acls add|list|remove`: ACLs in the manner of kafka-acls and rpk acl, over the admin
client's CreateAcls, DescribeAcls and DeleteAcls.

    rivulet acls add --allow-principal User:alice --operation read --operation describe --topic orders
    rivulet acls add --allow-principal User:app --consumer --topic orders --group app
    rivulet acls add --deny-principal User:mallory --deny-host 10.0.0.9 --operation all --topic '*'
    rivulet acls list --principal User:alice
    rivulet acls remove --allow-principal User:alice --operation read --topic orders
"""

from __future__ import annotations

import argparse

from rivulet.cli.cluster import _run
from rivulet.cli.common import CliError, add_connection_args
from rivulet.cli.output import Column, add_format_arg, print_table
from rivulet.client.admin.client import AsyncAdminClient
from rivulet.protocol.errors import ApiError
from rivulet.security.acls import (
    CLUSTER_NAME, SUPPORTED_OPERATIONS, WILDCARD, AccessControlEntry, AclBinding, AclBindingFilter,
)
from rivulet.security.acls import AclOperation as Op, AclPermissionType as Perm, ResourceType as RT
from rivulet.security.acls import PatternType, ResourcePattern

# kafka-acls' shortcuts: what a producer or a consumer needs
PRODUCER_TOPIC_OPS = (Op.WRITE, Op.DESCRIBE, Op.CREATE)
CONSUMER_TOPIC_OPS = (Op.READ, Op.DESCRIBE)


def _resources(args: argparse.Namespace) -> list[tuple[RT, str]]:
    out: list[tuple[RT, str]] = [(RT.TOPIC, t) for t in args.topic or ()]
    out += [(RT.GROUP, g) for g in args.group or ()]
    out += [(RT.TRANSACTIONAL_ID, t) for t in args.transactional_id or ()]
    out += [(RT.USER, u) for u in args.user or ()]
    out += [(RT.DELEGATION_TOKEN, d) for d in args.delegation_token or ()]
    if args.cluster:
        out.append((RT.CLUSTER, CLUSTER_NAME))
    return out


def _operations(args: argparse.Namespace) -> list[Op]:
    try:
        return [Op.parse(o) for o in args.operation or ()]
    except ValueError as e:
        raise CliError(str(e)) from None


def _entries(args: argparse.Namespace, ops: list[Op]) -> list[tuple[str, str, Op, Perm]]:
    """(principal, host, operation, permission) for every principal and host named."""
    allow_hosts = args.allow_host or [WILDCARD]
    deny_hosts = args.deny_host or [WILDCARD]
    out = [(p, h, op, Perm.ALLOW) for p in args.allow_principal or () for h in allow_hosts for op in ops]
    out += [(p, h, op, Perm.DENY) for p in args.deny_principal or () for h in deny_hosts for op in ops]
    return out


def bindings_to_add(args: argparse.Namespace) -> list[AclBinding]:
    """The bindings `acls add` creates: the operations on every resource named, or the
    --producer / --consumer sets, for every principal and host."""
    pattern_type = PatternType.parse(args.resource_pattern_type or "literal")
    if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise CliError("acls add takes --resource-pattern-type literal or prefixed")
    if not args.allow_principal and not args.deny_principal:
        raise CliError("name a principal: --allow-principal or --deny-principal (User:name)")
    wanted: list[tuple[RT, str, list[Op]]] = []
    if args.producer or args.consumer:
        for rt, name in _resources(args):
            ops: list[Op] = []
            if rt is RT.TOPIC:
                ops = [*(PRODUCER_TOPIC_OPS if args.producer else ()), *(CONSUMER_TOPIC_OPS if args.consumer else ())]
            elif rt is RT.GROUP and args.consumer:
                ops = [Op.READ]
            elif rt is RT.TRANSACTIONAL_ID and args.producer:
                ops = [Op.WRITE, Op.DESCRIBE]
            wanted.append((rt, name, list(dict.fromkeys(ops))))
        if args.producer and args.idempotent:
            wanted.append((RT.CLUSTER, CLUSTER_NAME, [Op.IDEMPOTENT_WRITE]))
    else:
        ops = _operations(args)
        if not ops:
            raise CliError("name the operations: --operation (read, write, describe, all, ...), or --producer/--consumer")
        wanted = [(rt, name, ops) for rt, name in _resources(args)]
    if not wanted:
        raise CliError("name a resource: --topic, --group, --cluster, --transactional-id, --user or --delegation-token")
    for rt, _name, ops in wanted:
        # As kafka-acls: the broker takes any operation on any resource type, the command only those that mean something.
        valid = SUPPORTED_OPERATIONS[rt] | {Op.ALL}
        if not set(ops) <= valid:
            raise CliError(f"ResourceType {rt.pascal} only supports operations "
                           f"{', '.join(op.pascal for op in sorted(valid))}")
    return [AclBinding(ResourcePattern(rt, name, pattern_type), AccessControlEntry(p, h, op, perm))
            for rt, name, ops in wanted for p, h, op, perm in _entries(args, ops)]


def filters_of(args: argparse.Namespace) -> list[AclBindingFilter]:
    """The filters of `acls list` and `acls remove`: every combination of the resources,
    principals, hosts and operations named; anything not named matches all."""
    pattern_type = PatternType.parse(args.resource_pattern_type or ("literal" if _resources(args) else "any"))
    resources: list[tuple[RT, str | None]] = [*_resources(args)] or [(RT.ANY, None)]
    ops = _operations(args) or [Op.ANY]
    principals: list[tuple[str | None, Perm]] = [(p, Perm.ALLOW) for p in args.allow_principal or ()]
    principals += [(p, Perm.DENY) for p in args.deny_principal or ()]
    principals += [(p, Perm.ANY) for p in args.principal or ()]
    hosts = [*(args.allow_host or ()), *(args.deny_host or ())] or [None]
    return [AclBindingFilter(rt, name, pattern_type, principal, host, op, perm)
            for rt, name in resources for principal, perm in principals or [(None, Perm.ANY)]
            for host in hosts for op in ops]


ACL_COLUMNS = [Column("PRINCIPAL", "principal"), Column("HOST", "host"),
               Column("RESOURCE-TYPE", "resource_type"), Column("RESOURCE-NAME", "resource_name"), Column("PATTERN", "pattern_type"),
               Column("OPERATION", "operation"), Column("PERMISSION", "permission")]


def _rows(bindings: list[AclBinding]) -> list[list[object]]:
    rows: list[list[object]] = []
    for b in sorted(bindings, key=lambda b: (b.entry.principal, b.pattern.resource_type, b.pattern.name,
                                             b.entry.operation)):
        rows.append([b.entry.principal, b.entry.host, b.pattern.resource_type.name, b.pattern.name,
                     b.pattern.pattern_type.name, b.entry.operation.name, b.entry.permission_type.name])
    return rows


async def _add(admin: AsyncAdminClient, args: argparse.Namespace) -> int:
    bindings = bindings_to_add(args)
    failed = [(b, e) for b, e in zip(bindings, await admin.create_acls(bindings)) if e is not None]
    if failed:
        raise CliError("; ".join(f"{b.entry.principal} {b.entry.operation.name} on {b.pattern.resource_type.name} "
                                 f"{b.pattern.name}: {e}" for b, e in failed))
    print(f"Created {len(bindings)} ACL(s):")
    print_table(ACL_COLUMNS, _rows(bindings))
    return 0


async def _list(admin: AsyncAdminClient, args: argparse.Namespace) -> int:
    found: dict[AclBinding, None] = {}
    for f in filters_of(args):
        for b in await admin.describe_acls(f):
            found[b] = None
    print_table(ACL_COLUMNS, _rows(list(found)), args.format)
    return 0


async def _remove(admin: AsyncAdminClient, args: argparse.Namespace) -> int:
    if not (args.all or _resources(args) or args.allow_principal or args.deny_principal or args.principal):
        raise CliError("name what to remove (a resource or a principal); removing every ACL needs --all")
    removed: list[AclBinding] = []
    for result in await admin.delete_acls(filters_of(args)):
        if isinstance(result, ApiError):
            raise CliError(str(result))
        removed.extend(result)
    print(f"Removed {len(removed)} ACL(s):")
    print_table(ACL_COLUMNS, _rows(removed))
    return 0


def _acls_command(args: argparse.Namespace) -> int:
    work = {"add": _add, "list": _list, "remove": _remove}[args.action]
    return _run(f"acls {args.action}", args, lambda admin: work(admin, args))


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    a = sub.add_parser("acls", help="add, list or remove ACLs (like kafka-acls and rpk acl)",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    a.add_argument("action", choices=["add", "list", "remove"], help="what to do")
    add_connection_args(a)
    for flag, what in (("topic", "topic"), ("group", "consumer group"), ("transactional-id", "transactional id"),
                       ("user", "user (for delegation tokens)"), ("delegation-token", "delegation token")):
        a.add_argument(f"--{flag}", action="append", metavar="NAME", help=f"a {what} ('*': every one; repeatable)")
    a.add_argument("--cluster", action="store_true", help="the cluster resource")
    a.add_argument("--resource-pattern-type", choices=["literal", "prefixed", "any", "match"],
                   help="how resource names match (add: literal or prefixed, default literal; list and remove: "
                        "default literal when a resource is named, else any)")
    a.add_argument("--allow-principal", action="append", metavar="PRINCIPAL", help="User:name to allow (repeatable)")
    a.add_argument("--deny-principal", action="append", metavar="PRINCIPAL", help="User:name to deny (repeatable)")
    a.add_argument("--principal", action="append", help="list/remove: ACLs of this principal, allow or deny")
    a.add_argument("--allow-host", action="append", metavar="HOST", help="hosts the allow applies to (default *)")
    a.add_argument("--deny-host", action="append", metavar="HOST", help="hosts the deny applies to (default *)")
    a.add_argument("--operation", action="append", metavar="OP",
                   help="read, write, create, delete, alter, describe, cluster_action, describe_configs, "
                        "alter_configs, idempotent_write, create_tokens, describe_tokens, all (repeatable)")
    a.add_argument("--producer", action="store_true", help="add: what a producer needs (WRITE, DESCRIBE, CREATE on "
                   "the topics; WRITE, DESCRIBE on the transactional ids)")
    a.add_argument("--idempotent", action="store_true", help="add with --producer: IDEMPOTENT_WRITE on the cluster")
    a.add_argument("--consumer", action="store_true", help="add: what a consumer needs (READ, DESCRIBE on the "
                   "topics; READ on the groups)")
    a.add_argument("--all", action="store_true", help="remove: every ACL, when nothing narrower is named")
    add_format_arg(a)
    a.set_defaults(func=_acls_command)
