"""``python -m socratic_exp.algorithms.socratic_rl <run_dir>``: a run's knowledge base as a readable timeline
(Socratic-RL, 3.5).

Reads ``viewpoints.jsonl`` only (no torch, no network): first every event in step order, then each viewpoint with
its source trace, utility history and status.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from socratic_exp.algorithms.socratic_rl.knowledge_base import LOG_NAME, ViewpointLog, latest_entries

EVENT_MARKS = {"created": "+", "activated": ">", "merged": "=", "measured": "~", "retired": "x", "distilled": "*"}


def timeline(run_dir: Path) -> str:
    records = list(ViewpointLog(run_dir / LOG_NAME).records())
    if not records:
        return f"{run_dir}: no viewpoints recorded"
    entries = latest_entries(records)
    statuses = [entry["status"] for entry in entries.values()]
    counts = ", ".join(
        f"{statuses.count(s)} {s}" for s in ("active", "queued", "retired", "distilled") if s in statuses
    )
    lines = [f"Knowledge base of {run_dir}: {len(entries)} viewpoints ({counts})", "", "Timeline"]
    for record in records:
        mark = EVENT_MARKS.get(record["event"], "?")
        detail = ""
        if record["event"] == "measured":
            last = record["utilities"][-1]
            detail = f"  U={last['utility']:+.3f} (with {last['with']:.3f}, without {last['without']:.3f})"
        elif record["event"] == "merged":
            detail = f"  ({record['sources']} sources)"
        elif record["history"] and record["event"] in ("retired", "distilled"):
            detail = f"  ({record['history'][-1]['reason']})"
        lines.append(
            f"  step {record['step']:>5}  {mark} {record['event']:<9} #{record['id']:<3} {record['text']}{detail}"
        )
    lines += ["", "Viewpoints"]
    for entry in sorted(entries.values(), key=lambda e: e["id"]):
        utilities = entry["utilities"]
        history = " ".join(f"{u['utility']:+.2f}@{u['step']}" for u in utilities) or "not measured"
        lines += [
            f"  #{entry['id']} [{entry['status']}] {entry['text']}",
            f"      written at step {entry['written_at']} ({entry['kind']}), from {entry['sources']} trace(s)",
            f"      source: {_one_line(entry['source_question'])} -> {_one_line(entry['source_trace'])}",
            f"      utility: {history}",
        ]
    return "\n".join(lines)


def _one_line(text: str, width: int = 80) -> str:
    flat = " | ".join(part for part in text.strip().splitlines() if part.strip())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m socratic_exp.algorithms.socratic_rl", description=__doc__.split("\n\n")[0].replace("\n", " ")
    )
    parser.add_argument("run_dir", type=Path, help="a run folder of algorithm=socratic_rl")
    args = parser.parse_args(argv)
    if not args.run_dir.is_dir():
        print(f"error: {args.run_dir} is not a folder (pass a run folder, e.g. outputs/<date>/<time>)", file=sys.stderr)
        return 2
    if not (args.run_dir / LOG_NAME).is_file():
        print(
            f"error: {args.run_dir} has no {LOG_NAME} (only algorithm=socratic_rl runs record viewpoints)",
            file=sys.stderr,
        )
        return 2
    print(timeline(args.run_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
