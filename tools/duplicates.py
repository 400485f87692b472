"""Count the places in rivulet/ that share six or more lines, and fail when the count grows.

Lines are compared stripped of indentation, blank and comment-only lines left out; a run of
six or more such lines found in two places (two files, or two spots of one file) is one pair,
however long it is. Generated code (rivulet/protocol/messages) is left out. The count allowed
is in tools/duplicates_baseline.json: lower it as copies go.

Usage: python tools/duplicates.py            (print the count, exit 1 above the baseline)
       python tools/duplicates.py -v         (also list the pairs, longest first)
       python tools/duplicates.py --update   (write today's count as the baseline)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = Path(__file__).with_name("duplicates_baseline.json")
MIN_LINES = 6
SKIP = ("rivulet/protocol/messages/",)
_WORD = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class Pair:
    a: str
    a_line: int
    b: str
    b_line: int
    lines: int

    def __str__(self) -> str:
        return f"{self.lines:3d} lines  {self.a}:{self.a_line}  {self.b}:{self.b_line}"


def _lines(path: Path) -> list[tuple[int, str]]:
    """(line number, stripped text) of the lines that count."""
    out = []
    for no, raw in enumerate(path.read_text().splitlines(), 1):
        text = raw.strip()
        if text and not text.startswith("#"):
            out.append((no, text))
    return out


def find_pairs(root: Path = ROOT) -> list[Pair]:
    files = {str(p.relative_to(root)): _lines(p) for p in sorted((root / "rivulet").rglob("*.py"))
             if not str(p.relative_to(root)).startswith(SKIP)}
    windows: dict[tuple[str, ...], list[tuple[str, int]]] = defaultdict(list)
    for name, lines in files.items():
        texts = [t for _, t in lines]
        for i in range(len(texts) - MIN_LINES + 1):
            w = tuple(texts[i:i + MIN_LINES])
            # Windows of brackets and one-word lines match by chance, not by copying.
            if sum(1 for t in w if len(_WORD.findall(t)) >= 2) >= MIN_LINES // 2:
                windows[w].append((name, i))
    # Shared windows on one diagonal (same two files, same shift) make one run.
    diagonals: dict[tuple[str, str, int], list[int]] = defaultdict(list)
    for spots in windows.values():
        if len(spots) < 2 or len(spots) > 50:
            continue
        for x in range(len(spots)):
            for y in range(x + 1, len(spots)):
                (fa, ia), (fb, ib) = sorted((spots[x], spots[y]))
                if fa == fb and abs(ia - ib) < MIN_LINES:
                    continue  # a run overlapping itself
                diagonals[(fa, fb, ia - ib)].append(ia)
    pairs = []
    for (fa, fb, shift), starts in diagonals.items():
        starts.sort()
        run_start = prev = starts[0]
        for s in starts[1:] + [None]:
            if s is not None and s == prev + 1:
                prev = s
                continue
            length = prev - run_start + MIN_LINES
            pairs.append(Pair(fa, files[fa][run_start][0], fb, files[fb][run_start - shift][0], length))
            if s is not None:
                run_start = prev = s
    return sorted(pairs, key=lambda p: (-p.lines, p.a, p.a_line))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update", action="store_true", help="write today's count as the baseline")
    ap.add_argument("-v", "--verbose", action="store_true", help="list the pairs")
    args = ap.parse_args(argv)
    pairs = find_pairs()
    n_files = sum(1 for p in (ROOT / "rivulet").rglob("*.py") if not str(p.relative_to(ROOT)).startswith(SKIP))
    if args.verbose:
        for p in pairs:
            print(p)
    if args.update:
        BASELINE.write_text(json.dumps({"pairs": len(pairs)}) + "\n")
        print(f"duplicates: baseline written, {len(pairs)} pairs")
        return 0
    allowed = json.loads(BASELINE.read_text())["pairs"]
    print(f"duplicates: {len(pairs)} pairs of places sharing {MIN_LINES}+ lines in {n_files} files of rivulet/ "
          f"({len(pairs) / max(n_files, 1):.2f} per file); baseline {allowed}")
    if len(pairs) > allowed:
        print(f"duplicates: {len(pairs) - allowed} more than the baseline; list them with "
              "`python tools/duplicates.py -v` and reuse instead of copying")
        return 1
    if len(pairs) < allowed:
        print("duplicates: below the baseline; lower it with --update")
    return 0


if __name__ == "__main__":
    sys.exit(main())
