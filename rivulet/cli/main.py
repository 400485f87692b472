"""The `rivulet` command: the broker and everyday administration."""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import signal
import sys

from rivulet.common.logs import LOG_FORMATS, configure_logging, parse_levels
from rivulet.server.config import BrokerConfig, ConfigError, help_text, load_properties


def _install_loop() -> None:
    try:
        import uvloop  # type: ignore[import-not-found]
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass


def _raise_fd_limit() -> None:
    """Each segment holds three files open; many partitions need more than the usual 1024."""
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = hard if hard != resource.RLIM_INFINITY else 1 << 20
        if soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ImportError, ValueError, OSError):
        pass


# The cyclic collector's thresholds for a broker (CPython's are 700, 10, 10). A request naming
# thousands of partitions allocates tens of thousands of objects, and a fetch waiting in the
# purgatory keeps them for up to fetch.max.wait.ms: at 700 young collections moved them to the
# oldest generation, whose full collections walk every partition's objects (0.2-0.4 s at 10,000
# partitions) and ran several times a second. At 10,000 most die before a collection sees them;
# a full collection waits for 100 middle ones instead of 10, so it comes about once per ten
# million allocations rather than per million.
GC_THRESHOLDS = (10_000, 10, 100)


def tune_gc() -> None:
    """The broker's collector thresholds (GC_THRESHOLDS)."""
    gc.set_threshold(*GC_THRESHOLDS)


def broker_main(args: argparse.Namespace) -> int:
    props: dict[str, str] = {}
    try:
        if args.config:
            props.update(load_properties(args.config))
        for item in args.override or []:
            if "=" not in item:
                raise ConfigError(f"--override expects key=value, got '{item}'")
            k, v = item.split("=", 1)
            props[k.strip()] = v.strip()
        config = BrokerConfig(props)
    except (ConfigError, OSError) as e:
        print(f"rivulet broker: {e}", file=sys.stderr)
        return 2
    try:
        configure_logging(parse_levels(args.log_level or []), args.log_format, args.log_file or config["log.file"],
                          config["log.file.max.bytes"], config["log.file.backup.count"])
    except (ValueError, OSError) as e:
        print(f"rivulet broker: {e}", file=sys.stderr)
        return 2
    _install_loop()
    _raise_fd_limit()
    tune_gc()
    from rivulet.controller.zk_client import BrokerIdInUseError
    from rivulet.server.broker import Broker

    async def run() -> int:
        # Before start-up: a SIGTERM while it starts (in cluster mode, once it is registered)
        # stops it cleanly afterwards instead of killing it with its registration left behind.
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            broker = Broker(config)
            await broker.start()
        except ConfigError as e:  # a setting only the broker's parts check (a file it names, an extra)
            print(f"rivulet broker: {e}", file=sys.stderr)
            return 2
        except (OSError, BrokerIdInUseError) as e:
            print(f"rivulet broker: cannot start: {e}", file=sys.stderr)
            return 1
        name, host, port = broker.advertised_listener
        _, bound_host, bound_port = broker.bound_listener
        # Both: the bound address says where the broker listens, the advertised one what clients are told.
        print(f"Rivulet broker {broker.node_id} listening on {bound_host or '0.0.0.0'}:{bound_port}, advertised as "
              f"{host}:{port} ({name}; cluster {broker.cluster_id}, data in {', '.join(config.log_dirs)})", flush=True)
        await stop.wait()
        print("shutting down", flush=True)
        await broker.shutdown()
        return 0

    return asyncio.run(run())


# The modules of the administration commands, in the order `rivulet --help` lists them, and
# the commands each adds. Only the module of the command being run is imported: the others
# cost a broker (and every other command) a few hundred milliseconds of start-up.
COMMANDS = {"topics": ("topics",), "produce": ("produce",), "consume": ("consume",), "groups": ("groups",),
            "cluster": ("cluster", "configs", "offsets", "delete-records"), "acls": ("acls",), "users": ("users",),
            "pipeline": ("pipeline",), "demo": ("demo",), "console": ("console",), "registry": ("registry",)}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser for every command, or for `command` alone (what it parses is the same)."""
    from rivulet import __version__
    p = argparse.ArgumentParser(prog="rivulet", description="A Kafka-protocol event-streaming broker.")
    p.add_argument("--version", action="version", version=f"rivulet {__version__}")
    # What run_command reads, for the commands without -b or --debug (their parsers set them).
    p.set_defaults(debug=False, bootstrap_server=None)
    sub = p.add_subparsers(dest="command", required=True)
    if command in (None, "broker"):
        b = sub.add_parser("broker", help="run a broker", epilog=help_text(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        b.add_argument("--config", help="a Kafka server.properties file")
        b.add_argument("--override", action="append", metavar="KEY=VALUE", help="override one property")
        b.add_argument("--log-level", action="append", metavar="[LOGGER=]LEVEL[,...]",
                       help="how much the broker logs: a level (debug, info, warning, error) for every logger "
                            "(default: info), or LOGGER=LEVEL for one logger and those below it, such as "
                            "rivulet.coordinator=debug; repeatable or comma-separated")
        b.add_argument("--log-format", choices=LOG_FORMATS, default="text",
                       help="text lines (default) or one JSON object per line")
        b.add_argument("--log-file", metavar="FILE",
                       help="write log lines to FILE instead of stderr, rotated by size (the log.file property; "
                            "log.file.max.bytes, log.file.backup.count)")
        b.set_defaults(func=broker_main)
    for module, commands in COMMANDS.items():
        if command is None or command in commands:
            importlib.import_module(f"rivulet.cli.{module}").add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # A known command first: only its parser (anything else, such as --help, gets them all).
    known = {"broker", *(c for commands in COMMANDS.values() for c in commands)}
    command = argv[0] if argv and argv[0] in known else None
    args = build_parser(command).parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
