"""The study: comparing runs, and what the papers presume and claim, measured on the testbed.

Owns:

- ``report.py``: ``python -m socratic_exp.report``, runs and sweeps compared (tables, plots, W&B reports);
- ``premises.py``: ``python -m socratic_exp.study.premises``, each method's precondition measured on the student
  before training;
- ``evidence.py``: the evidence sweep's scoreboard, every claim (the methods' ``CLAIMS``) scored on its runs;
- ``runs.py``: run folders as the report and the scoreboard read them;
- ``tables.py``: the tables they share (their plots build on ``core/curves.py``).

A method's own part of the study (its ``telemetry.py``: signals and plots; its ``evidence.py``: premises and claims)
lives in the method's folder, so that a method is one folder, and belongs to this room.

May import: ``core``, the config groups and ``runtime`` (the premises build a student as a run does), never
``multirun``.
"""
