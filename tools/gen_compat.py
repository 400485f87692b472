"""Print the API table of docs/compatibility.md: Rivulet's versions next to the schemas'.

Usage: python tools/gen_compat.py > /tmp/table.md  (then paste it into docs/compatibility.md)
"""

from __future__ import annotations

from rivulet.protocol import framing
from rivulet.server.apis import SUPPORTED_VERSIONS


def registered_versions() -> dict[int, tuple[int, int]]:
    """What a running broker advertises: KafkaApis plus the coordinators that register with it."""
    import asyncio
    import tempfile

    from rivulet.server.broker import Broker
    from rivulet.server.config import BrokerConfig

    async def run() -> dict[int, tuple[int, int]]:
        with tempfile.TemporaryDirectory() as d:
            b = Broker(BrokerConfig({"log.dirs": d, "listeners": "PLAINTEXT://127.0.0.1:0"}))
            await b.start()
            versions = dict(b.apis.supported)
            await b.shutdown()
            return versions
    try:
        return asyncio.run(run())
    except Exception:
        return dict(SUPPORTED_VERSIONS)


def main() -> None:
    ours = registered_versions()
    print("| key | API | Rivulet | Kafka schema (validVersions) |")
    print("|---:|---|---|---|")
    for key, (lo, hi) in sorted(framing.api_version_ranges().items()):
        name = framing.request_class(key).NAME.removesuffix("Request")
        mine = f"{ours[key][0]}-{ours[key][1]}" if key in ours else "—"
        print(f"| {key} | {name} | {mine} | {lo}-{hi} |")


if __name__ == "__main__":
    main()
