"""Every single-run command the README and the documentation pages (docs/*.md) show composes and validates (a
cookbook that errors is a bug)."""

from __future__ import annotations

import re
import shlex

import pytest
from conftest import ROOT, compose

from socratic_exp.core.errors import ConfigError
from socratic_exp.core.run_folder import native_bf16
from socratic_exp.multirun.grid import check_setup
from socratic_exp.runtime.assembly import build_components

# flags and values that are not overrides, or need something outside the config (a run folder, a shell variable)
NOT_CHECKABLE = ("--help", "--cfg", "resume=outputs", "$", "<")


# the guide to adding a method runs its commands on the method it adds, in a copy of the project
# (tests/test_adding_a_method.py)
NEEDS_ITS_OWN_FILES = {"adding-a-method.md"}
DOCUMENTS = [
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in NEEDS_ITS_OWN_FILES),
]


def readme_commands() -> list[list[str]]:
    """The app's commands in the README and the docs pages, each once (docs/index.md repeats the cookbook)."""
    commands = []
    lines = [line for path in DOCUMENTS for line in path.read_text().splitlines()]
    for line in lines:
        # the app (also launched on several processes), not its other modules (.report, .study.premises)
        match = re.search(r"(?:python|torchrun|accelerate launch)\b[^#`]*?-m socratic_exp(?![.\w])(.*)", line)
        if not match or "`" in line[: match.start()]:  # prose that mentions a command inline
            continue
        words = shlex.split(match.group(1).split("#", 1)[0].split("&&", 1)[0], posix=True)
        if any(flag in word for word in words for flag in NOT_CHECKABLE):
            continue
        command = [w for w in words if w not in ("-m", "--multirun", "...")]  # "...": and the user's other overrides
        if command not in commands:
            commands.append(command)
    return commands


COMMANDS = readme_commands()


def test_the_readme_shows_commands():
    assert len(COMMANDS) >= 20
    assert len(DOCUMENTS) > 10, "the docs pages are read too"


@pytest.mark.parametrize("overrides", COMMANDS, ids=[" ".join(c) or "(default)" for c in COMMANDS])
def test_readme_command_composes_and_validates(overrides):
    sweep_values = [o for o in overrides if "," in o.split("=", 1)[-1] and "{" not in o]
    # a sweep's first value of each swept key stands for the whole sweep
    single = [o.split(",", 1)[0] if o in sweep_values else o for o in overrides]
    sweep = next((o.split("=", 1)[1] for o in overrides if o.startswith("+sweep=")), None)
    if sweep:  # a paper sweep over a setup: the pair is one the sweep runs over (tests/test_sweep_matrix.py)
        experiment = next((o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")), None)
        check_setup(sweep, experiment, overrides)
    try:
        build_components(compose(*single))
    except ConfigError as error:  # an example file of the user's own, or a CPU feature, that this machine lacks
        lacks_bf16 = error.key == "model.decode_dtype" and not native_bf16()
        assert lacks_bf16 or ("data_files" in error.key and "does not exist" in str(error)), error
