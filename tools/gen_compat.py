"""Write the API table of docs/compatibility.md: Rivulet's versions next to the schemas'.

Usage: python tools/gen_compat.py          (rewrites the table between its markers)
       python tools/gen_compat.py --check  (exit 1 if the committed table is stale)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rivulet.protocol import framing  # noqa: E402
from rivulet.server.apis import SUPPORTED_VERSIONS  # noqa: E402
from rivulet.server.handlers.controller import CLUSTER_MODE_VERSIONS  # noqa: E402
from rivulet.server.handlers.replication import INTER_BROKER_VERSIONS  # noqa: E402

# Served only by brokers in cluster mode (zookeeper.connect set).
CLUSTER_ONLY = {**INTER_BROKER_VERSIONS, **CLUSTER_MODE_VERSIONS}

DOC = ROOT / "docs" / "compatibility.md"
START, END = "<!-- api-table:start -->", "<!-- api-table:end -->"


def table() -> str:
    lines = ["| key | API | Rivulet | Kafka schema (validVersions) |", "|---:|---|---|---|"]
    for key, (lo, hi) in sorted(framing.api_version_ranges().items()):
        name = framing.request_class(key).NAME.removesuffix("Request")
        if key in SUPPORTED_VERSIONS:
            mine = "{}-{}".format(*SUPPORTED_VERSIONS[key])
        elif key in CLUSTER_ONLY:
            mine = "{}-{} (cluster mode)".format(*CLUSTER_ONLY[key])
        else:
            mine = "—"
        lines.append(f"| {key} | {name} | {mine} | {lo}-{hi} |")
    return "\n".join(lines) + "\n"


def render(text: str) -> str:
    """``text`` (the document) with its table replaced by the current one."""
    head, sep, rest = text.partition(START)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"{DOC}: the markers {START} and {END} are missing")
    return f"{head}{START}\n{table()}{END}{tail}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check that the table is current")
    args = ap.parse_args()
    text = DOC.read_text()
    new = render(text)
    if args.check:
        if new != text:
            print("docs/compatibility.md's API table is stale: run python tools/gen_compat.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
