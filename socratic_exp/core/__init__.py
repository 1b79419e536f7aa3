"""The core: what every other part of the package stands on.

Owns:

- ``errors.py``: the errors a user sees, one line each;
- ``secrets.py``: secrets found and redacted, everywhere they could be written;
- ``component.py``: the base of every option (its settings, their help and their ranges);
- ``config.py``: Hydra's side: where ``conf/`` and ``sweeps/`` live, ``compose()``, the resolvers behind the run and
  sweep folders (``resume``), Hydra's own errors in one line; ``config_help.py``: ``--help``;
- ``console.py``: what a run shows on the terminal; ``progress_callbacks.py``: a trainer's progress shown there;
- ``run_folder.py``: the run folder, ``summary.json``, its files read back, and its one owner; ``metrics.py``:
  ``metrics.jsonl`` and the sink that writes it, the tracker and the progress display; ``checkpoints.py``: its
  checkpoints, which one a run resumes from and whether each can be read; ``curves.py``: the plots drawn from
  ``metrics.jsonl`` records (the run's learning curves, the methods' telemetry, the study's reports);
- ``distributed.py``: several processes, who writes and what is gathered;
- ``methods.py``: the interface a method folder fills (``Method``: its signals, figures, premises, promises,
  claims) and the types it is made of (``Claim``, ``Promise``).

May import: nothing of the package outside the core.
"""
