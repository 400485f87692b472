"""Print the API table of docs/compatibility.md: Rivulet's versions next to the schemas'.

Usage: python tools/gen_compat.py > /tmp/table.md  (then paste it into docs/compatibility.md)
"""

from __future__ import annotations

from rivulet.protocol import framing
from rivulet.server.apis import SUPPORTED_VERSIONS


def main() -> None:
    ours = SUPPORTED_VERSIONS
    print("| key | API | Rivulet | Kafka schema (validVersions) |")
    print("|---:|---|---|---|")
    for key, (lo, hi) in sorted(framing.api_version_ranges().items()):
        name = framing.request_class(key).NAME.removesuffix("Request")
        mine = f"{ours[key][0]}-{ours[key][1]}" if key in ours else "—"
        print(f"| {key} | {name} | {mine} | {lo}-{hi} |")


if __name__ == "__main__":
    main()
