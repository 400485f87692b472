"""The `rivulet` command: the broker and everyday administration."""

from __future__ import annotations

import argparse
import asyncio
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


def build_parser() -> argparse.ArgumentParser:
    from rivulet import __version__
    p = argparse.ArgumentParser(prog="rivulet", description="A Kafka-protocol event-streaming broker.")
    p.add_argument("--version", action="version", version=f"rivulet {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
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
    from rivulet.cli import topics
    topics.add_parser(sub)
    from rivulet.cli import produce; produce.add_parser(sub)  # noqa: E702
    from rivulet.cli import consume; consume.add_parser(sub)  # noqa: E702
    from rivulet.cli import groups; groups.add_parser(sub)  # noqa: E702
    from rivulet.cli import cluster; cluster.add_parser(sub)  # noqa: E702
    from rivulet.cli import acls; acls.add_parser(sub)  # noqa: E702
    from rivulet.cli import users; users.add_parser(sub)  # noqa: E702
    from rivulet.cli import pipeline; pipeline.add_parser(sub)  # noqa: E702
    from rivulet.cli import demo; demo.add_parser(sub)  # noqa: E702
    from rivulet.cli import console; console.add_parser(sub)  # noqa: E702
    from rivulet.cli import registry; registry.add_parser(sub)  # noqa: E702
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
