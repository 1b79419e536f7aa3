"""The sweep machinery (Hydra's multirun): ``-m`` sweeps and the paper grids of ``sweeps/``.

Owns:

- ``launcher.py``: a process (or a multi-process launch) per job, for the local and SLURM launchers of
  ``hydra_plugins/socratic_exp_launcher/`` (thin Hydra plugins: Hydra finds launchers only in that top-level
  package);
- ``grid.py``: what a paper sweep needs of its setup (refused pairs) and the jobs a launch runs;
- ``status.py``: the end of a sweep, its summary files and status table.

May import: ``core``, the config groups, ``runtime`` and ``study`` (a sweep's summary is the study's report).
"""
