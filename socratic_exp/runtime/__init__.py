"""The run's runtime: the plumbing behind the five stages of ``socratic_exp.run``.

Owns:

- ``stages/``: the five stages, a module each (compose and validate, build, evaluate before, train, evaluate after
  and write);
- ``lifecycle.py``: a run's process (its job, signals, exit codes, the failure record) and its tracker's start;
- ``requirements.py``: what a setting needs of the machine and its files (``dry_run``), before anything loads;
- ``assembly.py``: from a config to its components, its student and data, and a trainer;
- ``evaluation.py``: held-out evaluation, the collapse guard and the final evaluation;
- ``callbacks.py``: the run's trainer callbacks;
- ``methods.py``: every method's declaration (``core.methods.Method``), for the run and the study.

May import: ``core`` and the config groups (tasks, models, teachers, samplers, distillers, loggers, algorithms),
never ``study`` or ``multirun``.
"""
