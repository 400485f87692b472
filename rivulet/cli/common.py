"""What every client subcommand shares: how the broker is named, how client properties are
given, and how a failure reaches the user (one line, a non-zero exit code, no traceback
unless --debug; Ctrl-C is exit code 130; a closed stdout pipe ends the command quietly)."""

from __future__ import annotations

import argparse
import logging
import os
import select
import sys
import traceback
from typing import Callable

from rivulet.client.config import ClientConf, ConfigValue
from rivulet.client.connection import NotKafkaBroker
from rivulet.client.errors import KafkaError, KafkaException
from rivulet.common.config import ConfigError, load_properties
from rivulet.protocol.errors import ApiError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl-C
EXIT_PIPE = 141  # 128 + SIGPIPE: the reader of stdout went away
# A command waits this long for a broker to accept and answer ApiVersions (the clients' default,
# 30 s, is long for a person waiting on a port that is not Kafka's); --command-config overrides it.
SETUP_TIMEOUT_MS = 5000


class CliError(Exception):
    """A failure to report as one line; ``code`` is the exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def add_connection_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-b", "--bootstrap-server", metavar="HOST:PORT[,...]",
                   help=f"broker(s) to connect to (default: $RIVULET_BOOTSTRAP, else {DEFAULT_BOOTSTRAP})")
    p.add_argument("--command-config", metavar="FILE",
                   help="a .properties file of client properties (security, timeouts, ...), "
                        "as Kafka's tools take it")
    p.add_argument("--debug", action="store_true", help="show the full traceback when a command fails")


def client_config(args: argparse.Namespace, **defaults: ConfigValue) -> dict[str, ConfigValue]:
    """Client properties: ``defaults``, then the --command-config file, then -b (or, with neither
    -b nor a bootstrap.servers in the file, $RIVULET_BOOTSTRAP)."""
    conf: dict[str, ConfigValue] = {"socket.connection.setup.timeout.ms": SETUP_TIMEOUT_MS, **defaults}
    if args.command_config:
        try:
            conf.update(load_properties(args.command_config))
        except OSError as e:
            raise CliError(f"cannot read --command-config {args.command_config}: {e.strerror}", 2) from None
        except ConfigError as e:
            raise CliError(f"--command-config: {e}", 2) from None
    if args.bootstrap_server:
        conf["bootstrap.servers"] = args.bootstrap_server
    elif "bootstrap.servers" not in conf:
        conf["bootstrap.servers"] = os.environ.get("RIVULET_BOOTSTRAP") or DEFAULT_BOOTSTRAP
    return conf


def parse_kv(items: list[str] | None, flag: str) -> dict[str, str]:
    """Repeated ``KEY=VALUE`` arguments as a dict."""
    out = {}
    for item in items or []:
        if "=" not in item:
            raise CliError(f"{flag} expects key=value, got '{item}'", 2)
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _stdout_closed() -> bool:
    """True when nobody reads our stdout any more (``| head`` exited)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def _silence_stdout() -> None:
    # Python flushes stdout at exit; with the pipe gone that would print one more error.
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError):
        pass


def describe_failure(e: BaseException, bootstrap: str) -> str:
    if isinstance(e, CliError):
        return str(e)
    if isinstance(e, KafkaException):
        err = e.args[0]
        return err.str() if isinstance(err, KafkaError) else str(err)
    if isinstance(e, (ApiError, NotKafkaBroker)):  # the latter names the address and what answered
        return str(e)
    if isinstance(e, (ConnectionError, TimeoutError)) or (isinstance(e, OSError) and e.errno is not None):
        why = e.strerror if isinstance(e, OSError) and e.strerror else (str(e) or type(e).__name__)
        return f"cannot reach {bootstrap}: {why}"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def run_command(name: str, args: argparse.Namespace, body: Callable[[], int]) -> int:
    """Run one subcommand's ``body`` and turn whatever it raises into an exit code and one line."""
    debug = bool(args.debug)
    if not debug:  # the command reports a failure itself, in one line
        logging.getLogger("rivulet.client.brokers").setLevel(logging.CRITICAL)
    try:
        rc = body()
        sys.stdout.flush()
        return rc
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError as e:
        if _stdout_closed() or not isinstance(e.filename, str) and _flush_fails():
            _silence_stdout()
            return EXIT_PIPE
        return _report(name, args, e, debug)
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - this is the one place failures become a line
        return _report(name, args, e, debug)


def _flush_fails() -> bool:
    try:
        sys.stdout.flush()
        return False
    except BrokenPipeError:
        return True


def _report(name: str, args: argparse.Namespace, e: BaseException, debug: bool) -> int:
    if debug:
        traceback.print_exc()
    bootstrap = args.bootstrap_server or os.environ.get("RIVULET_BOOTSTRAP") or DEFAULT_BOOTSTRAP
    print(f"rivulet {name}: {describe_failure(e, bootstrap)}", file=sys.stderr)
    return e.code if isinstance(e, CliError) else 1


# How often, and how far apart, require_topics asks again for a topic being auto-created
# (100 ms apart, retry.backoff.ms's default: 5 s in all).
AUTO_CREATE_ASKS = 50
AUTO_CREATE_BACKOFF_S = 0.1


def require_topics(conf: ClientConf, topics: list[str], allow_auto_create: bool = False,
                   missing: str = "Topic '{topic}' does not exist: {error}") -> None:
    """Fail at once, in one line, when the broker is down or a topic is missing: the producer and
    the group consumer would otherwise wait (silently) for metadata that never comes."""
    import asyncio

    from rivulet.client.admin.client import AsyncAdminClient
    from rivulet.client.config import BY_NAME
    from rivulet.protocol.errors import ErrorCode

    # The properties an admin client shares with the producer or consumer it stands in for.
    shared = {k: v for k, v in conf.items() if k in BY_NAME and "admin" in BY_NAME[k].roles}

    async def check() -> None:
        admin = AsyncAdminClient(shared)
        try:
            md = await admin.metadata(topics, allow_auto_create)
            # The request that starts an auto-creation is answered UNKNOWN_TOPIC_OR_PARTITION, as
            # Kafka's: ask again (backing off as the clients do) until the topic is there.
            for _ in range(AUTO_CREATE_ASKS if allow_auto_create else 0):
                if all(t.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for t in md.topics):
                    break
                await asyncio.sleep(AUTO_CREATE_BACKOFF_S)
                md = await admin.metadata(topics, allow_auto_create)
        finally:
            await admin.close()
        for t in md.topics:
            if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise CliError(missing.format(topic=t.name, error=ApiError(ErrorCode(t.error_code))))
    asyncio.run(check())

