"""``python -m socratic_exp [overrides]``: the Hydra entry point."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from socratic_exp.core.config import config_dir, register_resolvers, register_sweeps, report_hydra_errors_in_one_line
from socratic_exp.core.secrets import protect_console
from socratic_exp.runtime.methods import declared_methods

protect_console(sys.argv[1:])  # first: Hydra's errors about an override echo it, secret and all
register_resolvers()
register_sweeps()
report_hydra_errors_in_one_line(declared_methods)


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")
def main(cfg: DictConfig) -> float | None:
    from socratic_exp.run import run_job

    return run_job(cfg)


if __name__ == "__main__":
    main()
