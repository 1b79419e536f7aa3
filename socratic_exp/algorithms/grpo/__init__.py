"""``algorithm=grpo``: TRL's GRPOTrainer as it is; ``config.py`` holds the settings every algorithm extends, and
``build.py`` maps them onto ``trl.GRPOConfig`` and composes the trainer class (every algorithm's build extends it).
What every algorithm therefore takes lives here too: DAPO's dynamic sampling (``dynamic_sampling.py``, the settings
and the choice of groups; ``dynamic_sampling_trainer.py``, the trainer layers) and what it shows while a run trains
(``telemetry.py``)."""
