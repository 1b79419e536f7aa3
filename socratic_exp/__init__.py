"""socratic_exp: teacher-guided reinforcement learning for LLM reasoning, as Hydra config choices on TRL."""

__version__ = "0.1.0"
