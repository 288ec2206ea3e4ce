"""The benchmark figures, written from `benchmarks/results/*.json` and never by hand: a short
table in README.md (a headline per row, with its goal) and every figure in docs/benchmarks.md.

    python -m benchmarks.readme            # rewrite both tables
    python -m benchmarks.readme --check    # exit 1 if either does not match the results

A test runs the check, so a figure in the README or the docs is always the one in the results file.
The rows are benchmarks/figures.py's (every figure) and benchmarks/headlines.py's (one figure and
its goal); this module writes the tables and the spot policy's goals into the two files.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.figures import NOT_YET, RESULTS, ROWS, _load, measured
from benchmarks.headlines import HEADLINES, NOT_YET_HEADLINES, _met, spot_goal_verdicts

__all__ = ["HEADLINES", "NOT_YET", "NOT_YET_HEADLINES", "RESULTS", "ROWS", "render", "render_docs"]

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs" / "benchmarks.md"
START = "<!-- benchmarks:start (python -m benchmarks.readme) -->"
END = "<!-- benchmarks:end -->"


def short_table() -> str:
    """README's: one headline per row, with its goal; every figure is in docs/benchmarks.md."""
    lines = ["| benchmark | headline | goal |", "|---|---|---|"]
    for name, row in ROWS.items():
        if measured(name):
            r = _load(name)
            cells = (row(r)[0], *HEADLINES[name](r))
        elif name in NOT_YET:
            cells = (NOT_YET[name][0], *NOT_YET_HEADLINES[name])
        else:
            continue
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table() -> str:
    lines = ["| benchmark | command | figures (from benchmarks/results/) |", "|---|---|---|"]
    for name, row in ROWS.items():
        if measured(name):
            lines.append("| " + " | ".join(row(_load(name))) + " |")
        elif name in NOT_YET:
            lines.append("| " + " | ".join(NOT_YET[name]) + " |")
    return "\n".join(lines)


def spot_goals() -> str:
    """The spot policy's goals as the docs' sentence under the full table."""
    verdicts = spot_goal_verdicts()
    if not verdicts:
        return ""
    goals = [f"{text}: {_met(met)}" for text, met in verdicts]
    starts = _load("spot_policy")["setting"]["start_ticks_per_trace"]
    return (
        f"\nThe spot policy's goals (issue #25), for ours + standby as the spot policy row has it "
        f"({starts} start ticks per trace; the quote's from the quote calibration row): "
        + "; ".join(goals)
        + "."
    )


def _between_markers(text: str, block: str, *, where: Path) -> str:
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    if not rest:
        raise SystemExit(f"{where.relative_to(ROOT)} has no {START!r} marker")
    return f"{head}{START}\n{block}{END}{tail}"


def render(readme: str) -> str:
    """README.md with its short table rendered from the results."""
    return _between_markers(readme, f"{short_table()}\n", where=README)


def render_docs(docs: str) -> str:
    """docs/benchmarks.md with every figure, and the spot policy's goals, from the results."""
    goals = spot_goals()
    block = f"{table()}\n{goals}\n" if goals else f"{table()}\n"
    return _between_markers(docs, block, where=DOCS)


TARGETS: dict[Path, Callable[[str], str]] = {README: render, DOCS: render_docs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a table is stale")
    args = parser.parse_args()
    stale = []
    for path, rendered in TARGETS.items():
        current = path.read_text()
        wanted = rendered(current)
        if current == wanted:
            continue
        if args.check:
            stale.append(path.relative_to(ROOT).as_posix())
        else:
            path.write_text(wanted)
    if stale:
        print(f"stale benchmark tables in {', '.join(stale)}: run python -m benchmarks.readme")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
