"""`rivulet console`: a web console over any Kafka-compatible cluster, through Rivulet's client.

Flask renders the pages from Jinja2 templates; htmx (vendored in static/) reloads the live
parts. Templates and static files ship inside the package, so `pip install` serves them."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
from typing import TYPE_CHECKING

from rivulet.cli.common import CliError, add_connection_args, client_config, run_command
from rivulet.client.connection import NotKafkaBroker
from rivulet.client.errors import KafkaException
from rivulet.protocol.errors import ApiError

if TYPE_CHECKING:
    from rivulet.cli.console.backend import ClusterView
    from rivulet.cli.console.registry import RegistryView
    from rivulet.registry.client import RegistryClient


def console_main(args: argparse.Namespace) -> int:
    return run_command("console", args, lambda: _serve(args))


def _serve(args: argparse.Namespace) -> int:
    import waitress

    from rivulet.cli.console.app import create_app
    from rivulet.cli.console.backend import ClusterView

    conf = client_config(args)
    if not args.debug:
        logging.getLogger("waitress").setLevel(logging.WARNING)
    view = ClusterView(conf)
    registry = RegistryView(RegistryClient(args.schema_registry)) if args.schema_registry else None
    try:
        _check_bootstrap(view)
        # Bound here rather than by waitress, which would log the failure as a traceback.
        sock = socket.create_server((args.host, args.port),
                                    family=socket.AF_INET6 if ":" in args.host else socket.AF_INET)
    except OSError as e:
        view.close()
        if isinstance(e, NotKafkaBroker):
            raise
        why = os.strerror(e.errno) if e.errno else str(e)
        raise CliError(f"cannot serve on {args.host}:{args.port}: {why}") from None
    # Threads enough for a few open pages, each reloading its live parts every 2 s.
    server = waitress.create_server(create_app(view, str(conf["bootstrap.servers"]), registry), sockets=[sock], threads=8,
                                    ident="rivulet-console")

    def stop(*_: object) -> None:
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"Rivulet console on http://{shown}:{sock.getsockname()[1]} for {conf['bootstrap.servers']}", flush=True)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        sock.close()
        view.close()
    return 0


def _check_bootstrap(view: ClusterView) -> None:
    """Refuse to start on a port that answers but is not Kafka's; a cluster that is only away
    is no reason not to start (the pages say it is away until it is back)."""
    try:
        view.cluster()
    except NotKafkaBroker:
        raise
    except (OSError, KafkaException, ApiError):
        pass


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    c = sub.add_parser("console", help="serve a web console of the cluster: brokers, topics, messages, groups")
    add_connection_args(c)
    c.add_argument("--host", default="127.0.0.1", help="address to serve on (default: 127.0.0.1)")
    c.add_argument("--port", type=int, default=8080, help="port to serve on (default: 8080; 0 picks a free one)")
    c.add_argument("-r", "--schema-registry", metavar="URL", default=os.environ.get("RIVULET_SCHEMA_REGISTRY"),
                   help="a schema registry to show the subjects of and to decode values through "
                        "(default: $RIVULET_SCHEMA_REGISTRY; none if unset)")
    c.set_defaults(func=console_main)
