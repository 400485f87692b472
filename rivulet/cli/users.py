"""``rivulet users add|list|remove``: SCRAM credentials, in the manner of ``kafka-configs
--entity-type users`` (``--add-config 'SCRAM-SHA-256=[iterations=8192,password=...]'``).

Through a broker (AlterUserScramCredentials and DescribeUserScramCredentials; the password is
salted here and never sent), or with ``--zookeeper`` straight into a cluster's
/config/users/<user> with a change notification, as ``kafka-configs --zookeeper`` did: the
way to create the inter-broker user before any broker runs."""

from __future__ import annotations

import argparse
import asyncio
import sys

from rivulet.cli.common import CliError, add_connection_args, client_config, run_command
from rivulet.cli.output import add_format_arg, print_json
from rivulet.client.admin.client import AsyncAdminClient
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.security.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MECHANISMS, ScramCredential


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        return args.password
    line = sys.stdin.readline().rstrip("\n")  # kept out of the process list
    if not line:
        raise CliError("rivulet users add: give --password, or the password on stdin", 2)
    return line


def _check_iterations(mechanism: str, iterations: int) -> None:
    if iterations < MECHANISMS[mechanism].min_iterations:
        raise CliError(f"{mechanism}: Too few iterations ({iterations}; at least "
                       f"{MECHANISMS[mechanism].min_iterations})")
    if iterations > MAX_ITERATIONS:
        raise CliError(f"{mechanism}: Too many iterations ({iterations}; at most {MAX_ITERATIONS})")


def _print(found: dict[str, list[tuple[str, int]] | ApiError], fmt: str = "text") -> int:
    failed = 0
    listed = []
    for user in sorted(found):
        creds = found[user]
        if isinstance(creds, ApiError):
            print(f"{user}: {creds.message or creds.code.name}", file=sys.stderr)
            failed = 1
            continue
        if fmt == "json":
            listed.append({"user": user, "credentials": [{"mechanism": m, "iterations": i} for m, i in sorted(creds)]})
        else:
            print(f"{user}\t" + ", ".join(f"{m}=[iterations={i}]" for m, i in sorted(creds)))
    if fmt == "json":
        print_json(listed)
    return failed


def _merge(results: dict[str, ApiError | None], more: dict[str, ApiError | None]) -> None:
    """A user's first error stays."""
    for user, error in more.items():
        if results.get(user) is None:
            results[user] = error


async def _via_broker(args: argparse.Namespace) -> int:
    admin = AsyncAdminClient(client_config(args, **{"client.id": "rivulet-admin"}))
    try:
        if args.action == "list":
            return _print(await admin.describe_user_scram_credentials(args.user or None), args.format)
        if args.action == "add":
            password = _password(args)
            # One request per mechanism: Kafka refuses two changes to one user in a request.
            results: dict[str, ApiError | None] = {}
            for m in args.mechanism:
                _merge(results, await admin.alter_user_scram_credentials(
                    [(u, m, password, args.iterations) for u in args.user], []))
        else:
            mechanisms = args.mechanism
            if not mechanisms:  # every mechanism the users have
                found = await admin.describe_user_scram_credentials(args.user)
                pairs = [(u, m) for u, c in found.items() if not isinstance(c, ApiError) for m, _ in c]
                missing = [u for u, c in found.items() if isinstance(c, ApiError)]
                if missing:
                    raise CliError(f"no SCRAM credentials for {', '.join(missing)}")
            else:
                pairs = [(u, m) for u in args.user for m in mechanisms]
            results = {}
            for m in dict.fromkeys(m for _, m in pairs):
                _merge(results, await admin.alter_user_scram_credentials([], [(u, pm) for u, pm in pairs if pm == m]))
    finally:
        await admin.close()
    failed = {u: e for u, e in results.items() if e is not None}
    for user, e in sorted(failed.items()):
        print(f"{user}: {e.message or e.code.name}", file=sys.stderr)
    if not failed:
        print(f"{'Updated' if args.action == 'add' else 'Removed'} SCRAM credentials of {', '.join(sorted(results))}")
    return 1 if failed else 0


def _via_zookeeper(args: argparse.Namespace) -> int:
    from rivulet.controller.zk_client import KafkaZkClient
    zk = KafkaZkClient(args.zookeeper)
    zk.start()
    try:
        if args.action == "list":
            users = args.user or zk.get_entity_names("users")
            found: dict[str, list[tuple[str, int]] | ApiError] = {}
            for u in users:
                creds = {m: ScramCredential.from_text(t).iterations
                         for m, t in zk.get_entity_config("users", u).items() if m in MECHANISMS}
                found[u] = list(creds.items()) if creds else ApiError(
                    ErrorCode.RESOURCE_NOT_FOUND, "Attempt to describe a user credential that does not exist")
            return _print(found, args.format)
        for user in args.user:
            stored = {m: t for m, t in zk.get_entity_config("users", user).items() if m in MECHANISMS}
            if args.action == "add":
                password = _password(args)
                for m in args.mechanism:
                    stored[m] = ScramCredential.from_password(MECHANISMS[m], password, args.iterations).to_text()
            else:
                for m in args.mechanism or list(stored):
                    if stored.pop(m, None) is None:
                        raise CliError(f"{user} has no {m} credential")
            zk.update_entity_config("users", user, MECHANISMS, stored)
        print(f"{'Updated' if args.action == 'add' else 'Removed'} SCRAM credentials of {', '.join(args.user)}")
        return 0
    finally:
        zk.close()


def users_main(args: argparse.Namespace) -> int:
    if args.action in ("add", "remove") and not args.user:
        print(f"rivulet users {args.action}: --user is required", file=sys.stderr)
        return 2
    if args.action == "add":
        if not args.mechanism:
            print("rivulet users add: --mechanism is required (SCRAM-SHA-256, SCRAM-SHA-512)", file=sys.stderr)
            return 2
        for m in args.mechanism:
            try:
                _check_iterations(m, args.iterations)
            except CliError as e:
                print(f"rivulet users add: {e}", file=sys.stderr)
                return 2
    if args.zookeeper:
        return run_command(f"users {args.action}", args, lambda: _via_zookeeper(args))
    return run_command(f"users {args.action}", args, lambda: asyncio.run(_via_broker(args)))


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    u = sub.add_parser("users", help="SCRAM users: add, list, remove their credentials")
    u.add_argument("action", choices=["add", "list", "remove"], help="what to do")
    add_connection_args(u)
    u.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                   help="write and read the credentials in ZooKeeper directly (a cluster, before its brokers run)")
    u.add_argument("--user", action="append", default=[], help="the user (repeatable; list: all when not given)")
    u.add_argument("--mechanism", action="append", default=[], choices=sorted(MECHANISMS),
                   help="add: the mechanisms to set; remove: to remove (default: all of the user's)")
    u.add_argument("--password", help="add: the password (else read from stdin)")
    u.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                   help=f"add: PBKDF2 iterations ({DEFAULT_ITERATIONS}-{MAX_ITERATIONS}; default {DEFAULT_ITERATIONS})")
    add_format_arg(u)
    u.set_defaults(func=users_main)
