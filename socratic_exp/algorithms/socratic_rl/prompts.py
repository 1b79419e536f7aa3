"""Socratic-RL's prompts: the reflection prompt its reflect step hands to the teacher (``Reflective.reflect``, and
its meta-learning: ``Reflective.meta_update``, ``TrainableReflective.reflection_example``), used by instruct teachers
whose option sets no ``reflect_template`` of its own."""

from __future__ import annotations

# The reflection prompt (Sections 3.1-3.2) for instruct teachers. Placeholders: those of the guidance prompt
# (teachers/base.py, GUIDANCE_TEMPLATE) and {exemplars}, which meta-learning by prompt (the blackbox teacher) fills in
# with viewpoints measured helpful or useless for this student.
REFLECTION_TEMPLATE = (
    "You are a teacher analysing a student's attempt at a problem. Find the root cause of the student's error "
    "(a logical fallacy, a procedural error or a flawed assumption) and write ONE general, reusable viewpoint that "
    "would help this student on similar problems. Do not solve this problem and do not state its answer.\n"
    "Problem: {question}\n"
    "Student's attempt: {student_answer}\n"
    "Verifier: {verifier_feedback}\n"
    "{exemplars}"
    "Answer with one line that starts with Principle:, Heuristic:, Causal explanation: or Counter-example:"
)
