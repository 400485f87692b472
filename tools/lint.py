"""Run ruff (rules in pyproject.toml) and fail only on findings the baseline does not hold.

tools/lint_baseline.json counts the findings from before the checks, per file, rule and
message (without line numbers or the complexity figure, so edits around them do not matter).
A finding beyond those counts fails the run; fixing one lets you tighten the baseline.

Usage: python tools/lint.py            (print the summary and any new findings; exit 1 on one)
       python tools/lint.py --update   (write the baseline from today's findings)
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = Path(__file__).with_name("lint_baseline.json")
_FIGURES = re.compile(r" \(\d+ > \d+\)$")


def findings() -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "json", "--exit-zero", "."],
                          cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"ruff failed: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def key(f: dict) -> str:
    path = Path(f["filename"]).resolve().relative_to(ROOT).as_posix()
    return f"{path} {f['code']} {_FIGURES.sub('', f['message'])}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update", action="store_true", help="write the baseline from today's findings")
    args = ap.parse_args(argv)
    found = findings()
    counts = Counter(key(f) for f in found)
    if args.update:
        BASELINE.write_text(json.dumps(dict(sorted(counts.items())), indent=0) + "\n")
        print(f"ruff: baseline written, {sum(counts.values())} findings under {len(counts)} entries")
        return 0
    allowed: dict[str, int] = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    seen: Counter[str] = Counter()
    new = []
    for f in sorted(found, key=lambda f: (f["filename"], f["location"]["row"])):
        k = key(f)
        seen[k] += 1
        if seen[k] > allowed.get(k, 0):
            new.append(f)
    by_rule = Counter(f["code"] for f in found)
    print("ruff: " + ", ".join(f"{code} {n}" for code, n in sorted(by_rule.items())) if found else "ruff: no findings")
    fixed = sum(max(0, n - counts.get(k, 0)) for k, n in allowed.items())
    print(f"ruff: {len(found)} findings, {len(found) - len(new)} baselined ({len(allowed)} baseline entries), "
          f"{len(new)} new" + (f"; {fixed} baselined ones fixed, tighten with --update" if fixed else ""))
    for f in new:
        path = Path(f["filename"]).resolve().relative_to(ROOT).as_posix()
        print(f"  NEW {path}:{f['location']['row']}:{f['location']['column']}: {f['code']} {f['message']}")
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main())
