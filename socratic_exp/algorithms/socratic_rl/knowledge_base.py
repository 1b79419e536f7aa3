"""Socratic-RL's viewpoints: the active set V and the knowledge base V_KB (Algorithm 1), and their record on disk.

Every viewpoint the teacher writes is an ``Entry`` of the knowledge base, with its source trace, the step it was
written, its utility history and its status:

- ``active``: in V, prepended to the student's prompts;
- ``queued``: written while V was full (``budget``); when a place frees, the queued viewpoint written from the most
  traces joins V (the error the student makes most often; ties: the oldest);
- ``retired``: its utility stayed at or below ``retire_threshold`` for ``retire_patience`` measurements in a row;
- ``distilled``: it was in V at a distillation, which compresses V into the weights and then empties V.

A new viewpoint that is a near-duplicate of an entry (``merge_similarity``: difflib's ratio of the texts without
their label, case and punctuation) is merged into it: the entry counts one more source. A near-duplicate of a
distilled entry brings it back into V (the student makes that error again); of a retired entry, it stays retired.

``viewpoints.jsonl`` in the run folder is the append-only record: one line per event (created, merged, activated,
measured, retired, distilled), each with the entry's full state after the event; the last line of an id is that
viewpoint's current state. A resumed run drops the lines after its checkpoint's step (those steps are redone).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from socratic_exp.core import distributed
from socratic_exp.teachers.reflection import strip_label

Status = Literal["active", "queued", "retired", "distilled"]
LOG_NAME = "viewpoints.jsonl"
_NOT_WORD = re.compile(r"[^a-z0-9*+\-/=<>()]+")


def normalized(text: str) -> str:
    """The text compared for near-duplicates: without its ``Principle:`` label, lower-case, punctuation as spaces."""
    return " ".join(_NOT_WORD.split(strip_label(text).lower())).strip()


def similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, normalized(a), normalized(b)).ratio()


@dataclasses.dataclass
class Entry:
    id: int
    text: str
    kind: str
    source_question: str
    source_trace: str  # the student's completion the teacher reflected on
    written_at: int  # the step
    status: Status = "active"
    sources: int = 1  # traces that produced it (1 + merged near-duplicates)
    utilities: list[dict[str, float]] = dataclasses.field(default_factory=list)  # {step, utility, with, without}
    history: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # {step, status, reason}
    source_score: float = 0.0  # the verifier's score and reason for the source trace (the reflection prompt's, and
    source_reason: str = "wrong"  # the error class of the teacher's preference pairs; older records lack them)

    @property
    def last_utility(self) -> float | None:
        return self.utilities[-1]["utility"] if self.utilities else None

    @property
    def mean_utility(self) -> float | None:
        return sum(u["utility"] for u in self.utilities) / len(self.utilities) if self.utilities else None


class ViewpointLog:
    """``viewpoints.jsonl``: appended one event per line, flushed at once, so a crash loses at most the line being
    written (a torn last line is skipped when read). In a distributed launch only the main process writes it."""

    def __init__(self, path: Path):
        self.path = path
        self.writes = distributed.is_main()

    def append(self, event: str, step: int, entry: Entry) -> None:
        if not self.writes:
            return
        line = json.dumps({"event": event, "step": step, **dataclasses.asdict(entry)})
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()

    def records(self) -> Iterator[dict[str, Any]]:
        if not self.path.is_file():
            return
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a crash

    def truncate_after(self, step: int) -> int:
        """Keep the events up to ``step`` (a run resuming from that step's checkpoint redoes the rest)."""
        if not self.writes or not self.path.is_file():
            return 0
        lines = self.path.read_text(encoding="utf-8").splitlines()
        kept = [json.dumps(record) for record in self.records() if record["step"] <= step]
        self.path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        return len(lines) - len(kept)


def latest_entries(records: Iterable[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each viewpoint's state after its last event."""
    state: dict[int, dict[str, Any]] = {}
    for record in records:
        state[record["id"]] = record
    return state


class KnowledgeBase:
    """V and V_KB with the merging, budget and retirement rules above; every change goes to the log."""

    def __init__(
        self,
        budget: int,
        merge_similarity: float,
        retire_threshold: float,
        retire_patience: int,
        log: ViewpointLog | None = None,
    ):
        self.budget = budget
        self.merge_similarity = merge_similarity
        self.retire_threshold = retire_threshold
        self.retire_patience = retire_patience
        self.log = log
        self.entries: dict[int, Entry] = {}
        self.order: list[int] = []  # V and the queue, in the order they join V

    # --- views ------------------------------------------------------------------------------------------------
    @property
    def active(self) -> list[Entry]:
        return [self.entries[i] for i in self.order if self.entries[i].status == "active"]

    def with_status(self, *statuses: Status) -> list[Entry]:
        return [entry for entry in self.entries.values() if entry.status in statuses]

    def counts(self) -> dict[str, float]:
        counts = {status: 0.0 for status in ("active", "queued", "retired", "distilled")}
        for entry in self.entries.values():
            counts[entry.status] += 1
        return counts

    # --- changes ----------------------------------------------------------------------------------------------
    def add(
        self,
        text: str,
        kind: str,
        question: str,
        trace: str,
        step: int,
        trace_score: float = 0.0,
        trace_reason: str = "wrong",
    ) -> tuple[Entry, str]:
        """File a viewpoint written from ``trace`` (with its verifier score and reason); returns its entry and what
        happened: ``created`` (into V or the queue), ``merged``, ``reactivated`` (a distilled one is back) or
        ``known_useless`` (a retired one)."""
        match = self.nearest(text)
        if match is None:
            entry = Entry(
                len(self.entries),
                text,
                kind,
                question,
                trace,
                step,
                status="queued",
                source_score=trace_score,
                source_reason=trace_reason,
            )
            self.entries[entry.id] = entry
            self._set(entry, "queued", step, "written", event="created")
            self.order.append(entry.id)
            self._fill(step)
            return entry, "created"
        match.sources += 1
        if match.status == "distilled":
            self.order = [i for i in self.order if i != match.id] + [match.id]
            self._set(match, "queued", step, "written again after its distillation", event="merged")
            self._fill(step)
            return match, "reactivated"
        self._write("merged", step, match)
        return match, "known_useless" if match.status == "retired" else "merged"

    def nearest(self, text: str) -> Entry | None:
        """The most similar entry at or above ``merge_similarity``, if any."""
        best, best_score = None, self.merge_similarity
        for entry in self.entries.values():
            score = similarity(text, entry.text)
            if score >= best_score:
                best, best_score = entry, score
        return best

    def record_utility(self, entry: Entry, step: int, utility: float, acc_with: float, acc_without: float) -> None:
        entry.utilities.append({"step": step, "utility": utility, "with": acc_with, "without": acc_without})
        self._write("measured", step, entry)

    def retire_useless(self, step: int) -> list[Entry]:
        """Retire the active viewpoints whose last ``retire_patience`` utilities are all at or below the threshold."""
        retired = []
        for entry in self.active:
            recent = entry.utilities[-self.retire_patience :]
            if len(recent) == self.retire_patience and all(u["utility"] <= self.retire_threshold for u in recent):
                self._set(entry, "retired", step, f"utility <= {self.retire_threshold} for {len(recent)} probe(s)")
                retired.append(entry)
        self._fill(step)
        return retired

    def distill_reset(self, step: int) -> list[Entry]:
        """After a distillation: V's viewpoints are marked distilled and V empties (the queue then refills it)."""
        distilled = self.active
        for entry in distilled:
            self._set(entry, "distilled", step, "compressed into the student's weights")
        self._fill(step)
        return distilled

    def _fill(self, step: int) -> None:
        """Queued viewpoints join V while it has room: most sources first, then the oldest."""
        room = self.budget - len(self.active)
        queued = [self.entries[i] for i in self.order if self.entries[i].status == "queued"]
        for entry in sorted(queued, key=lambda e: -e.sources)[: max(room, 0)]:  # sorted() is stable: oldest first
            self._set(entry, "active", step, "joined V")
        self.order = [i for i in self.order if self.entries[i].status in ("active", "queued")]

    def _set(self, entry: Entry, status: Status, step: int, reason: str, event: str | None = None) -> None:
        entry.status = status
        entry.history.append({"step": step, "status": status, "reason": reason})
        self._write(event or {"active": "activated"}.get(status, status), step, entry)

    def _write(self, event: str, step: int, entry: Entry) -> None:
        if self.log is not None:
            self.log.append(event, step, entry)

    # --- checkpoints ------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"entries": [dataclasses.asdict(e) for e in self.entries.values()], "order": list(self.order)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.entries = {record["id"]: Entry(**record) for record in state["entries"]}
        self.order = list(state["order"])
