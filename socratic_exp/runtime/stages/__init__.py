"""The five stages of a run, in the order ``socratic_exp.run`` calls them, one module each:

1. ``compose.py``: the composed config validated into components, and the run folder checked;
2. ``build.py``: the console, the tracker, the teacher checked, the student and data loaded (``Run``: what the
   stages hand on to each other);
3. ``evaluate_before.py``: the evaluator and the collapse guard, the held-out evaluation before training, and the
   metrics file it starts;
4. ``train.py``: the algorithm's TRL trainer with the run's callbacks;
5. ``evaluate_after.py``: the final evaluation, the final model, and the run folder's summary, curves and table.

Each stage takes what the earlier ones made and hands on what it makes; the plumbing they use lives beside this
package in ``runtime/`` and in ``core/``.
"""
