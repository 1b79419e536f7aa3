"""``python -m socratic_exp [overrides]``: the Hydra entry point."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from socratic_exp.hydra_support import config_dir, register_resolvers, register_sweeps

register_resolvers()
register_sweeps()


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")
def main(cfg: DictConfig) -> float | None:
    from socratic_exp.run import run_job

    return run_job(cfg)


if __name__ == "__main__":
    main()
