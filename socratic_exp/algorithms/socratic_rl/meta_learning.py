"""Teacher meta-learning from measured viewpoint utilities U(v) (Socratic-RL, Section 3.3; done by DPO on viewpoint
pairs as its Section 4 and Section 7, Phase 2 propose): the preference pairs a teacher with weights of its own learns
from (``teacher_dpo.TeacherDPO`` trains it on them).

**Preference pairs across probes** (``cross_probe_pairs``). Socratic-RL's Algorithm 1, line 17 updates the
teacher "using feedback on the utility of past viewpoints from V_KB", not only those of the latest probe: with the
testbed's ``viewpoint_budget=1`` a probe measures one viewpoint, so pairs formed within one probe never exist. The rule:

- the pool is every viewpoint measured so far (this probe's and every earlier probe's, whatever its status now:
  active, queued, retired or distilled), one member per text, scored by the mean of all its measurements;
- a pair is two members with different texts, of the same *error class* (the verifier's reason for the trace the
  viewpoint was written from: ``wrong``, ``format``, ``truncated``, ...; the same trace implies the same class), at
  least one of them measured at this probe (earlier pairs were offered at earlier probes), whose mean utilities differ
  by at least ``margin``;
- the better one is chosen, the worse rejected, for the better one's source trace (the reflection it came from);
- most separated pairs first (ties: the order of ``new``, then ``past``), at most ``limit``.

U(v) is a difference taken against the same student at the same time, so the student's drift between probes cancels
to first order; that is what makes measurements from different probes comparable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from socratic_exp.teachers.reflection import ScoredViewpoint


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def cross_probe_pairs(
    new: Sequence[ScoredViewpoint], past: Sequence[ScoredViewpoint], margin: float, limit: int
) -> list[tuple[ScoredViewpoint, ScoredViewpoint, float]]:
    """``(better, worse, gap)`` pairs by the rule of the module docstring: ``new`` holds this probe's measurements,
    ``past`` every earlier one (a text may appear several times: one per probe that measured it)."""
    measurements: dict[str, list[float]] = {}
    latest: dict[str, Any] = {}  # text -> its latest measurement (its source question and trace)
    for item in [*past, *new]:
        measurements.setdefault(item.text, []).append(item.utility)
        latest[item.text] = item
    fresh = list(dict.fromkeys(item.text for item in new))
    order = list(dict.fromkeys([*fresh, *(item.text for item in past)]))  # this probe's texts first
    score = {text: _mean(measurements[text]) for text in order}
    candidates = []
    for i, first in enumerate(fresh):  # each pair once, with at least one text measured at this probe
        for second in order[i + 1 :]:
            if latest[first].trace.reason != latest[second].trace.reason:
                continue
            better, worse = (first, second) if score[first] >= score[second] else (second, first)
            gap = score[better] - score[worse]
            if gap > 0 and gap >= margin:  # equal utilities state no preference, whatever the margin
                candidates.append((latest[better], latest[worse], gap))
    candidates.sort(key=lambda pair: pair[2], reverse=True)  # stable: ties keep their order
    return candidates[:limit]
