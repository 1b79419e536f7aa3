"""``algorithm=grpo``: TRL's GRPOTrainer as it is; ``config.py`` maps the config onto ``trl.GRPOConfig``."""
