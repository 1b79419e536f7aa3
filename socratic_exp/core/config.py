"""Hydra glue: where the configs and sweeps live, ``compose()``, the resolvers behind the run and sweep folders
(``resume``) and ``--help``, and Hydra's own errors in one line."""

from __future__ import annotations

import errno
import os
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from socratic_exp.core.methods import Method, moved_key

RESUME_KEY = "resume"
RUN_DIR_ENV = "SOCRATIC_EXP_RUN_DIR"  # pins the run folder (every rank of a multi-node launch)
PACKAGE = Path(__file__).resolve().parents[1]  # socratic_exp/


def config_dir() -> Path:
    """The packaged copy of ``conf/`` in an installed wheel, else the checkout's top-level ``conf/``."""
    packaged = PACKAGE / "conf"
    return packaged if packaged.is_dir() else PACKAGE.parent / "conf"


def sweeps_dir() -> Path:
    """The packaged copy of ``sweeps/``, else the checkout's."""
    packaged = PACKAGE / "sweeps"
    return packaged if packaged.is_dir() else PACKAGE.parent / "sweeps"


def register_sweeps() -> None:
    """Each ``sweeps/<name>.yaml`` becomes the option ``+sweep=<name>`` (a global overlay, usually with
    ``hydra.mode: MULTIRUN`` and ``hydra.sweeper.params``). The paper grids live at the top of the repository, apart
    from the component options in ``conf/``, so they are registered here rather than found on the search path."""
    from hydra.core.config_store import ConfigStore

    global _registered_sweeps
    paths = sorted(sweeps_dir().glob("*.yaml"))
    stamp = tuple((str(path), path.stat().st_mtime_ns) for path in paths)
    if stamp == _registered_sweeps:  # stored already: ConfigStore lives as long as the process (compose() calls this)
        return
    store = ConfigStore.instance()
    for path in paths:
        store.store(group="sweep", name=path.stem, node=OmegaConf.load(path), package="_global_")
    _registered_sweeps = stamp


_registered_sweeps: tuple[tuple[str, int], ...] | None = None  # the sweep files register_sweeps() stored, as stamped


def compose(*overrides: str) -> DictConfig:
    """The composed config for ``overrides``, as the app would see it (for notebooks, scripts and tests)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_resolvers()
    register_sweeps()
    parse_config_files_once()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides))


def parse_config_files_once() -> None:
    """Hydra parses every YAML file of the defaults tree again at each ``compose`` (its caching repository lives for
    one call), about 6 ms a file; a sweep composes each of its jobs, and the checks, the scoreboard and the tests
    compose thousands of configs. Each file is parsed once per process here and handed to Hydra as a copy (Hydra
    merges into what it loads); a file changed on disk (size or time) is parsed again. Written for Hydra 1.3's
    ``FileConfigSource.load_config``, wrapped once."""
    import copy

    from hydra._internal.core_plugins.file_config_source import FileConfigSource
    from hydra.plugins.config_source import ConfigResult

    load = FileConfigSource.load_config
    if getattr(load, "parses_once", False):
        return
    parsed: dict[tuple[str, str, int, int], ConfigResult] = {}

    def load_config(self: FileConfigSource, config_path: str) -> ConfigResult:
        full_path = os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path)))
        try:
            stat = os.stat(full_path)
        except OSError:
            return load(self, config_path)  # Hydra's own error
        key = (self.path, config_path, stat.st_size, stat.st_mtime_ns)
        if key not in parsed:
            parsed[key] = load(self, config_path)
        found = parsed[key]
        return ConfigResult(config=copy.deepcopy(found.config), path=found.path, provider=found.provider,
                            header=dict(found.header), is_schema_source=found.is_schema_source)  # fmt: skip

    load_config.parses_once = True  # type: ignore[attr-defined]
    FileConfigSource.load_config = load_config  # type: ignore[method-assign]


def report_hydra_errors_in_one_line(methods: Callable[[], Iterable[Method]] = tuple) -> None:
    """Hydra's own failures (an override it cannot apply or parse, a run folder it cannot create) end in one line on
    stderr and exit 2, like the run's, instead of Hydra's partial traceback; ``HYDRA_FULL_ERROR=1`` keeps Hydra's
    traceback. (Hydra 1.3's ``_run_hydra`` reports through the module's ``run_and_report``, replaced here; the run's
    own failures never reach it: ``lifecycle.end_failed`` reports them.) ``methods`` gives the methods' declarations,
    asked for only when an override fails: a key one of them took over says where it lives now."""
    from hydra._internal import utils

    hydras = utils.run_and_report

    def run_and_report(func: Any) -> Any:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            return hydras(func)
        try:
            return func()
        except Exception as err:
            ours = _user_error_within(err)  # raised by our resolvers (a run folder in use, not shared)
            print(f"error: {ours if ours else hydra_error_line(err, methods)}", file=sys.stderr)
            sys.exit(2)

    utils.run_and_report = run_and_report


def _user_error_within(err: BaseException) -> BaseException | None:
    """The ``UserError`` that ``err`` wraps (OmegaConf wraps what a resolver raises), if any."""
    from socratic_exp.core.errors import UserError

    seen: set[int] = set()
    found: BaseException | None = err
    while found is not None and id(found) not in seen:
        if isinstance(found, UserError):
            return found
        seen.add(id(found))
        found = found.__cause__ or found.__context__
    return None


def _file_error_line(found: OSError) -> str:
    """``hydra_error_line`` for a file error: the run folder, the override or the file it is about."""
    path = os.path.abspath(os.fsdecode(found.filename))
    why = "a file is in the way" if isinstance(found, FileExistsError | NotADirectoryError) else found.strerror
    overrides = [arg.split("=", 1) for arg in sys.argv[1:] if "=" in arg and not arg.startswith("-")]
    given = {key.lstrip("+~"): value for key, value in overrides}
    outputs = os.environ.get("SOCRATIC_EXP_OUTPUTS") or "outputs"
    folders = [outputs, os.environ.get(RUN_DIR_ENV), given.get("hydra.run.dir"), given.get("hydra.sweep.dir")]
    if any(_is_run_folder(_within(path, folder)) for folder in folders if folder):
        return (
            f"cannot create the run folder {found.filename} ({why}) (fix: a writable folder: "
            f"hydra.run.dir=<folder>, $SOCRATIC_EXP_OUTPUTS or ${RUN_DIR_ENV})"
        )
    name = os.path.basename(path)
    for key, value in overrides:
        if name and name in key:  # Hydra looked the key up as a config group: a file named after it
            problem = "is too long to be a config key" if found.errno == errno.ENAMETOOLONG else "is no config key"
            return (
                f"the override {_shortened(key)}=...: its key {problem} (looked up as a config group: "
                f"{found.strerror}) (fix: check its spelling; python -m socratic_exp --help lists the keys)"
            )
        if value and _within(path, value) is not None:  # e.g. resume=<folder>, whose summary.json was looked for
            return f"{key}={_shortened(value)}: {found.strerror} (fix: check the path)"
    from socratic_exp.core.errors import file_system_error

    known = file_system_error(found)  # a file of a run folder: a full disk, a file in the way, ...
    if known is not None:
        return str(known)
    return f"cannot use {_shortened(path, 200)} ({found.strerror}) (fix: check the path and its permissions)"


def _within(path: str, folder: str) -> str | None:
    """``path`` relative to ``folder`` ("" for the folder itself or a parent that mkdir could not make), or None
    outside it."""
    folder = os.path.abspath(folder)
    if path == folder or folder.startswith(path + os.sep):
        return ""
    return path[len(folder) + 1 :] if path.startswith(folder + os.sep) else None


def _is_run_folder(relative: str | None) -> bool:
    """Whether a path relative to the outputs is a run folder: <date>/<time>, multirun/<date>/<time>/<job>, no file
    names."""
    return relative is not None and "." not in relative and relative.count(os.sep) < 4


def _shortened(text: str, most: int = 60) -> str:
    return text if len(text) <= most else f"{text[: most - 3]}... ({len(text)} characters)"


def hydra_error_line(err: BaseException, methods: Callable[[], Iterable[Method]] = tuple) -> str:
    """One line for an error Hydra raises before or around the run: its message's lines joined (OmegaConf's
    ``full_key`` / ``object_type`` details dropped), its cause's first line, or what a file error means.

    A file error (Hydra's own, or one a resolver raised) names its file: the run folder it could not create where
    the file is a run folder (``hydra.run.dir``, ``$SOCRATIC_EXP_RUN_DIR``, the outputs root or a ``<date>/<time>``
    folder below it, or a parent of one); the override whose key Hydra looked up as a config group's file where the
    file is named after that key (a key too long for a file name); the override whose value it is
    (``resume=<path>``); else the file and the reason (``errors.file_system_error``: a file inside a run folder)."""
    found: BaseException | None = err
    for _ in range(8):  # OmegaConf wraps what a resolver raises, keeping it as the context only (and in its message)
        if found is None or isinstance(found, OSError):
            break
        found = found.__cause__ or found.__context__
    if isinstance(found, OSError) and found.filename and (found is err or str(found) in str(err)):
        return _file_error_line(found)
    overridden = re.search(r"Could not override '([\w.]+)'", str(err))
    # a key that a method took over says where it lives now
    if overridden is not None and (moved := moved_key(overridden.group(1), methods())) is not None:
        return str(moved)
    details = ("full_key:", "object_type=", "reference_type=", "See https://", "Config search path", "provider=")
    lines = [line.strip() for line in str(err).splitlines() if line.strip() and not line.strip().startswith(details)]
    cause = err.__cause__
    if cause is not None and str(cause).strip() and str(cause).strip().splitlines()[0] not in " ".join(lines):
        lines.append(str(cause).strip().splitlines()[0])
    return " ".join(lines)[:500] or type(err).__name__


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("sx_run_dir"):
        OmegaConf.register_new_resolver("sx_run_dir", _run_dir)
    if not OmegaConf.has_resolver("sx_sweep_dir"):
        # cached: a sweep's jobs re-compose their config and must get the folder their launch resolved
        OmegaConf.register_new_resolver("sx_sweep_dir", _sweep_dir, use_cache=True)
    if not OmegaConf.has_resolver("sx_output_subdir"):
        OmegaConf.register_new_resolver("sx_output_subdir", _output_subdir)
    if not OmegaConf.has_resolver("sx_config_help"):
        from socratic_exp.core.config_help import help_resolver

        OmegaConf.register_new_resolver("sx_config_help", help_resolver)  # --help: every key with its help text
    if not OmegaConf.has_resolver("sx_config_groups"):
        from socratic_exp.core.config_help import groups_help

        # --help: the groups, the sweeps' arm groups apart ($ doubled for Hydra's string.Template)
        OmegaConf.register_new_resolver(
            "sx_config_groups", lambda: groups_help(config_dir(), sweeps_dir()).replace("$", "$$")
        )


def _run_dir(resume: Any, fresh: str, *, _root_: DictConfig) -> str:
    """The run folder: ``fresh`` (or ``$SOCRATIC_EXP_RUN_DIR``) unless resuming (``resume=auto`` or
    ``resume=<run folder>``); in a distributed launch, the main process's choice for every rank
    (``distributed.run_folder_of_launch``).

    A missing folder, or one that is not a run folder, is not an error here (Hydra would print a traceback): the
    run gets a fresh folder and reports it in one line.
    """
    from socratic_exp.core.distributed import run_folder_of_launch
    from socratic_exp.core.run_folder import is_run_folder

    def decide() -> str:
        start = os.environ.get(RUN_DIR_ENV) or fresh
        if resume in (None, "", False):
            return start
        if str(resume) != "auto":  # a folder that is not a run's is never written into: the run refuses it
            return str(resume) if is_run_folder(resume) else start
        overrides = list(OmegaConf.select(_root_, "hydra.overrides.task", default=[]) or [])
        found = find_interrupted_run(Path(start).parent.parent, overrides)
        return str(found) if found else start

    return run_folder_of_launch(decide, each_decides=bool(os.environ.get(RUN_DIR_ENV)))


def _output_subdir(subdir: str, *, _root_: DictConfig) -> str | None:
    """Where Hydra writes ``.hydra/``, asked just before it writes anything into the run folder: the moment the run's
    process claims the folder (``run_folder.claim_run_folder``), so that a second process wanting it is refused
    before it writes a byte. Only the main process claims and writes (it removes secrets from the files; another
    rank writing them afterwards would put them back), and never over an existing ``.hydra/``: a resumed run keeps
    the record of how it was launched (the attempts' overrides are in ``summary.json``)."""
    from socratic_exp.core import distributed
    from socratic_exp.core.run_folder import claim_run_folder

    if not distributed.is_main():
        return None
    output_dir = OmegaConf.select(_root_, "hydra.runtime.output_dir", default=None, throw_on_missing=False)
    if not output_dir:  # --cfg, --help: no run
        return subdir
    claim_run_folder(Path(output_dir))
    return None if (Path(output_dir) / subdir).is_dir() else subdir


def _sweep_dir(resume: Any, fresh: str) -> str:
    """The sweep folder: ``fresh`` unless resuming a sweep: ``resume=<sweep folder>``, or ``resume=auto`` for the
    newest sweep folder launched with the same overrides (those of this command line). Its completed jobs are then
    skipped. Resolved once, by the launching process: the jobs get the value from the resolver cache."""
    if resume in (None, "", False):
        return fresh
    if str(resume) != "auto":
        return str(resume) if (Path(str(resume)) / "multirun.yaml").is_file() else fresh
    wanted = comparable_overrides([a for a in sys.argv[1:] if not a.startswith(("-", "hydra.", "hydra/"))])
    for multirun_file in sorted(Path(fresh).parent.parent.glob("*/*/multirun.yaml"), reverse=True):
        earlier = OmegaConf.select(OmegaConf.load(multirun_file), "hydra.overrides.task", default=[]) or []
        if comparable_overrides(list(earlier)) == wanted:
            return str(multirun_file.parent)
    return fresh


_INTERPOLATION = re.compile(r"^\$\{(?:oc\.select:)?([A-Za-z_][\w.]*)(?:,[^}]*)?\}$")


def typed_key(cfg: DictConfig, key: str) -> str:
    """The key a user sets to change ``key``: where ``key``'s value is an interpolation of another key (``${seed}``,
    ``${oc.select:algorithm.max_attempts,2}``), that key, followed through chains; else ``key`` itself."""
    seen = {key}
    while True:
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
        if not isinstance(node, DictConfig) or leaf not in node:
            return key
        raw = node._get_node(leaf)._value()  # the unresolved value
        match = _INTERPOLATION.match(raw) if isinstance(raw, str) else None
        if match is None or match.group(1) in seen:
            return key
        source = match.group(1)
        if OmegaConf.select(cfg, source, default=_MISSING, throw_on_missing=False) is _MISSING:
            return key  # oc.select fell back to its default: nothing else to set
        seen.add(source)
        key = source


_MISSING = object()


def comparable_overrides(overrides: list[str]) -> list[str]:
    """Overrides as two launches are compared: ``resume`` aside, sorted, and secrets redacted (the copies kept in
    a run folder never hold them, so a run launched with a secret is still found by ``resume=auto``)."""
    from socratic_exp.core.secrets import redact_overrides

    return sorted(redact_overrides([o for o in overrides if o.split("=", 1)[0].lstrip("+~") != RESUME_KEY]))


def find_interrupted_run(outputs_root: Path, overrides: list[str]) -> Path | None:
    """The newest run folder under ``outputs_root/<date>/<time>`` launched with the same overrides (``resume``
    aside) that did not complete and has a checkpoint to continue from (a damaged record is never resumed).

    The checkpoints' files are not read here (a search stays cheap): a run whose latest checkpoint is damaged is
    found, and resumes from its latest readable one (``checkpoints.last_checkpoint``); a run none of whose
    checkpoints can be read is found as well, and refused in one line naming each damaged file, rather than passed
    over for an older run or a fresh start, which would leave its damage unsaid."""
    wanted = comparable_overrides(overrides)
    candidates = sorted(outputs_root.glob("*/*/.hydra/overrides.yaml"), reverse=True)
    for overrides_file in candidates:
        run = overrides_file.parent.parent
        if comparable_overrides(list(OmegaConf.load(overrides_file))) != wanted:
            continue
        from socratic_exp.core.checkpoints import checkpoint_step
        from socratic_exp.core.run_folder import DAMAGED, read_summary

        status = read_summary(run).get("status")
        checkpoints = (run / "checkpoints").glob("checkpoint-*")  # not the damaged ones set aside (damaged-*)
        if status not in ("completed", DAMAGED) and any(checkpoint_step(p) is not None for p in checkpoints):
            return run
    return None
