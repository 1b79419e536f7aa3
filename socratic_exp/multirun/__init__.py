"""The sweep machinery (Hydra's multirun): ``-m`` sweeps and the paper grids of ``sweeps/``.

Owns:

- the launchers' work, for the local and SLURM launchers of ``hydra_plugins/socratic_exp_launcher/`` (thin Hydra
  plugins: Hydra finds launchers only in that top-level package), a process (or a multi-process launch) per job:

  - ``local.py``: the local launcher (``hydra/launcher=local``): ``n_jobs`` jobs at a time, their threads and GPU
    slots;
  - ``slurm.py``: the SLURM path (``hydra/launcher=slurm``): its settings checked before anything is submitted, a
    multi-process job run in its SLURM task;
  - ``processes.py``: how a job runs as processes (one, or a ``torchrun`` / ``accelerate launch`` of several) and
    the entry each of them runs;
  - ``job_folders.py``: the job folders: another grid's refused, completed jobs found, failed ones recorded;
  - ``job_secrets.py``: the command line's secrets kept out of the files the jobs read;
  - ``settings.py``: the launchers' numeric settings, checked in one line each;
  - ``orphans.py``: a job interrupted when its sweep process dies;
- ``grid.py``: what a paper sweep needs of its setup (refused pairs) and the jobs a launch runs;
- ``status.py``: the end of a sweep, its summary files and status table.

May import: ``core``, the config groups, ``runtime`` and ``study`` (a sweep's summary is the study's report).
"""
