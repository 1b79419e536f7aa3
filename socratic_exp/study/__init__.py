"""The study: what the papers presume and claim, measured on the testbed, and the helpers the run report shares.

- ``premises.py``: ``python -m socratic_exp.study.premises``, each method's precondition measured on the student
  before training (the measurements are the methods' own: ``<method>/evidence.py``);
- ``evidence.py``: the evidence sweep's scoreboard, every claim (the methods' ``CLAIMS``) scored on its runs;
- ``runs.py``: run folders as the report and the scoreboard read them;
- ``tables.py`` / ``curves.py``: the tables and plots they share.
"""
