"""The run's runtime: the plumbing behind the five stages of ``socratic_exp.run``.

Owns:

- ``lifecycle.py``: a run's process (its job, signals, exit codes, the failure record) and its tracker's start;
- ``compose.py``: the composed config validated into components, and the run folder checked before anything is
  rewritten (stage 1);
- ``requirements.py``: what a setting needs of the machine and its files (``dry_run``), before anything loads;
- ``assembly.py``: from a config to its components, its student and data, and a trainer (stage 2);
- ``evaluation.py``: held-out evaluation, the collapse guard and the final evaluation (stages 3 and 5);
- ``callbacks.py``: the run's trainer callbacks (stage 4).

May import: ``core`` and the config groups (tasks, models, teachers, samplers, distillers, loggers, algorithms),
never ``study`` or ``multirun``.
"""
