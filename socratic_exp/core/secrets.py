"""Secrets: which values are secret, and keeping them out of everything a run writes.

A secret is the value of a secret-looking key (``is_secret_key``: ``hub_token``, ``api_key``, ``Authorization``...),
in the composed config or on the command line (``+algorithm.trl_args.hub_token=...``, or an entry of a dict value:
``+teacher.extra_body={api_key: ...}``). Keys that only name where a secret is (``api_key_env``: an environment
variable's name) are not secrets; the variable's value is read where it is used and never written.

What each writer gets:

- configs and overrides: ``redact`` / ``redact_overrides`` (summary.json, W&B, run names, the launcher's lines);
- files written before the run could redact them: ``scrub_hydra_files`` (Hydra's ``.hydra/*.yaml``, a sweep's
  ``multirun.yaml``), ``scrub_text`` (any text file), ``scrub_training_args`` (TRL's pickled arguments);
- log records: ``redact_logs`` (every record of the process, whatever logger or handler writes it);
- the process's own arguments: ``protect_command_line`` does all of the above for a run at its start;
- the console: ``protect_console`` (Hydra's own errors echo an override before any run code exists);
- anything else the process writes (an error's message, a traceback in ``summary.json``, the line a run ends with):
  ``scrub`` / ``scrub_data``, which replace every secret this process knows (``known_secrets``): those of its command
  line, and the values of its secret-looking environment variables (``OPENAI_API_KEY``, ``HF_TOKEN``,
  ``WANDB_API_KEY``, a teacher's ``api_key_env`` variable given on the command line);
- a sweep's jobs: a launcher pickles each job (its overrides, the sweep's config, Hydra's state) into a file the job
  reads (a SLURM submission under ``.submitit/``, the local launcher's job file), so a secret there would be on disk
  for as long as the sweep runs. ``through_environment`` / ``config_through_environment`` write each secret as
  ``${oc.env:SOCRATIC_EXP_SECRET_<n>}`` instead, and the launcher puts the variables in the jobs' environment: the
  job composes the very same config, and no file holds the value.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Any

# A key is secret-looking when one of its words (split at _ - . and camelCase) is one of these, or starts with
# secret / password / auth (not author); ``*_env`` keys name a variable, and tokenizer tokens (pad_token) are text.
_SECRET_WORDS = {"token", "key", "apikey", "secret", "password", "passwd", "pwd", "auth", "credential", "credentials"}
_SECRET_STARTS = ("secret", "password", "auth", "bearer", "cookie")
_AUTHOR = {"author", "authors", "authored", "authorship"}
_TOKENIZER_TOKEN = re.compile(r"(^|_)(pad|eos|bos|unk|sep|cls|mask)_token(_id)?$")
_WORD_SPLIT = re.compile(r"[_\-\s.]+|(?<=[a-z0-9])(?=[A-Z])")
REDACTED = "<redacted>"
_LOOSE_ENTRY = re.compile(r"([\w.-]+)\s*[:=]\s*['\"]?([^,}\]'\"\s]+)")


def is_secret_key(key: Any) -> bool:
    """Whether a config key (or an override's key, ``+teacher.extra_body.api_key``) names a secret: its last part
    has a word such as token, key, secret, password or auth (``hub_token``, ``apiKey``, ``Authorization``), but not
    a count (``max_new_tokens``), a variable's name (``api_key_env``) or a tokenizer's token (``pad_token``)."""
    name = str(key).lstrip("+~").rsplit(".", 1)[-1]
    lowered = name.lower()
    if lowered.endswith("_env") or _TOKENIZER_TOKEN.search(lowered):
        return False
    words = [word.lower() for word in _WORD_SPLIT.split(name) if word]
    return "apikey" in lowered or any(
        word in _SECRET_WORDS or (word.startswith(_SECRET_STARTS) and word not in _AUTHOR) for word in words
    )


def secret_values(overrides: list[str]) -> list[str]:
    """The values given to secret-looking keys on the command line (what must reach no file), longest first; a
    dict or list value also yields its secret-looking entries (``+teacher.extra_body={api_key: X}``)."""
    found: set[str] = set()
    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep or not value:
            continue
        if is_secret_key(key) and value.strip("'\"") not in ("", "null", "None"):
            found.update({value, value.strip("'\"")})
        elif value.lstrip().startswith(("{", "[")):
            found.update(_secret_leaves(value))
    return sorted((v for v in found if len(v) >= 4), key=len, reverse=True)


def _secret_leaves(value: str) -> set[str]:
    """Secret-looking entries of a dict/list override value, parsed as Hydra parses it."""
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_override(f"x={value}").value()
    except Exception:  # not Hydra syntax (Hydra's error will echo it): the entries that look like `key: value`
        return {v for k, v in _LOOSE_ENTRY.findall(value) if is_secret_key(k) and v not in ("null", "None")}
    found: set[str] = set()

    def walk(node: Any, secret: bool) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, secret or is_secret_key(k))
        elif isinstance(node, list):
            for v in node:
                walk(v, secret)
        elif secret and node not in (None, ""):
            found.add(str(node))

    walk(parsed, False)
    return found


def redact(data: Any) -> Any:
    """A copy of ``data`` with the values of secret-looking keys replaced (keys ending in ``_env`` name a variable)."""
    if isinstance(data, dict):
        return {key: REDACTED if is_secret_key(key) and value else redact(value) for key, value in data.items()}
    if isinstance(data, list):
        return [redact(v) for v in data]
    return data


def redact_overrides(overrides: list[str]) -> list[str]:
    """Command-line overrides with the values of secret-looking keys replaced."""
    return [_redact_override(o) for o in overrides]


def _redact_override(override: str) -> str:
    """``key=<redacted>`` for a secret-looking key; a dict or list value keeps its shape with its secret-looking
    entries replaced (``+teacher.extra_body={api_key: <redacted>, top_k: 20}``)."""
    key, sep, value = override.partition("=")
    if not sep or not value:
        return override
    if is_secret_key(key):
        return f"{key}={REDACTED}"
    if value.lstrip().startswith(("{", "[")):
        for secret in sorted(_secret_leaves(value), key=len, reverse=True):
            value = value.replace(secret, REDACTED)
    return f"{key}={value}"


def scrub_text(path: Path, secrets: list[str]) -> bool:
    """Replace every secret value in a text file by ``<redacted>``; True when the file changed."""
    if not secrets or not path.is_file():
        return False
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return False
    clean = text
    for secret in secrets:
        clean = clean.replace(secret, REDACTED)
    if clean != text:
        path.write_text(clean, encoding="utf-8")
    return clean != text


def scrub_hydra_files(run_dir: Path, secrets: list[str] | None = None) -> None:
    """Redact secret-looking values from Hydra's own dumps (``.hydra/*.yaml``, a sweep's ``multirun.yaml``), which
    are written before the run starts: a key passed on the command line must not stay on disk. ``secrets`` (the
    values given on the command line) are then replaced wherever else they appear (``hydra.job.override_dirname``
    joins the overrides into one string)."""
    from omegaconf import OmegaConf

    for path in [run_dir / ".hydra" / n for n in ("config.yaml", "overrides.yaml", "hydra.yaml")] + [
        run_dir / "multirun.yaml"
    ]:
        if not path.is_file():
            continue
        scrub_text(path, secrets or [])
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        if isinstance(data, list):
            clean: Any = [_redact_override(o) if isinstance(o, str) else o for o in data]
        else:
            clean = redact(data)
            overrides = (clean.get("hydra") or {}).get("overrides") or {}
            for kind, items in overrides.items():
                overrides[kind] = [_redact_override(o) for o in items]
        if clean != data:
            path.write_text(OmegaConf.to_yaml(OmegaConf.create(clean)))


def scrub_training_args(args: Any, folder: Path) -> None:
    """Overwrite ``folder/training_args.bin`` with a copy of ``args`` whose secret-looking fields are blank."""
    import copy
    import dataclasses

    path = folder / "training_args.bin"
    secret = [f.name for f in dataclasses.fields(args) if is_secret_key(f.name) and getattr(args, f.name, None)]
    if not secret or not path.is_file():
        return
    import torch

    clean = copy.copy(args)
    for name in secret:
        object.__setattr__(clean, name, None)
    torch.save(clean, path)


_LOG_SECRETS: list[str] = []  # every secret this process knows, longest first (``known_secrets``)
SECRET_VARIABLE = "SOCRATIC_EXP_SECRET_"  # + a number: a secret of the command line, handed to a sweep's job


def known_secrets() -> list[str]:
    """The secrets this process knows (its command line's, its environment's), longest first."""
    return list(_LOG_SECRETS)


def scrub(text: str) -> str:
    """``text`` with every secret this process knows replaced by ``<redacted>``: for what is written without going
    through logging or the console (an error's message or traceback in ``summary.json``)."""
    for secret in _LOG_SECRETS:
        text = text.replace(secret, REDACTED)
    return text


def scrub_data(data: Any) -> Any:
    """A copy of JSON-like ``data`` whose strings lose every secret this process knows (``scrub``)."""
    if not _LOG_SECRETS:
        return data
    if isinstance(data, str):
        return scrub(data)
    if isinstance(data, dict):
        return {key: scrub_data(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [scrub_data(value) for value in data]
    return data


def environment_secrets(overrides: list[str] | None = None) -> list[str]:
    """The values of this process's secret-looking environment variables (``OPENAI_API_KEY``, ``HF_TOKEN``,
    ``WANDB_API_KEY``, ``SOCRATIC_EXP_SECRET_<n>``) and of the variables that ``*_env`` overrides name
    (``teacher.api_key_env=MY_KEY``): libraries read them, and an error of theirs may quote one. A value shorter than
    8 characters (``1``, ``true``) is a setting, not a key; in the variables a launcher hands secrets in, one
    shorter than 4 is not looked for (as on the command line: ``secret_values``). The shell's ``PWD`` (a password's
    word) and a value naming an existing file (``GOOGLE_APPLICATION_CREDENTIALS``: where a key is) are no secrets."""
    import os

    named = {o.partition("=")[2].strip("'\"") for o in overrides or [] if o.partition("=")[0].endswith("_env")}
    found = set()
    for name, value in os.environ.items():
        if name.startswith(SECRET_VARIABLE):
            if len(value.strip()) >= 4:
                found.add(value)
        elif ((is_secret_key(name) and name not in _SHELL_VARIABLES) or name in named) and _could_be_a_key(value):
            found.add(value)
    return sorted(found, key=len, reverse=True)


_SHELL_VARIABLES = {"PWD", "OLDPWD", "SSH_AUTH_SOCK"}  # secret-looking names of the shell's own variables


def _could_be_a_key(value: str) -> bool:
    """Long enough to be a key (8 characters), and not the name of an existing file."""
    if len(value.strip()) < 8:
        return False
    try:
        return not Path(value).expanduser().exists()
    except (OSError, ValueError):  # too long a name, a NUL byte: not a path
        return True


def redact_logs(secrets: list[str]) -> None:
    """Every log record created from now on in this process has ``secrets`` replaced, whatever logger or handler
    writes it (console and log file alike): a library, or Hydra's own launchers (``#0 : <overrides>``), logging a
    secret given on the command line, in its message or in a logged exception's traceback. A record factory, since
    Hydra re-configures logging (and its handlers). The secrets also join ``known_secrets`` (``scrub``,
    ``protect_console``'s streams)."""
    fresh = [secret for secret in secrets if secret and secret not in _LOG_SECRETS]
    if not fresh:
        return
    if not _LOG_SECRETS:
        make_record = logging.getLogRecordFactory()

        def redacting_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = make_record(*args, **kwargs)
            try:
                message = record.getMessage()
            except (TypeError, ValueError):  # a malformed format: the handler reports it, as without this factory
                return record
            if any(secret in message for secret in _LOG_SECRETS):
                record.msg, record.args = scrub(message), None
            if record.exc_info and not record.exc_text:  # a logged exception's traceback: formatted once, clean
                record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
            if record.stack_info:
                record.stack_info = scrub(record.stack_info)
            return record

        logging.setLogRecordFactory(redacting_factory)
    _LOG_SECRETS.extend(fresh)
    _LOG_SECRETS.sort(key=len, reverse=True)


class RedactingStream:
    """A console stream that replaces the secrets this process knows (``known_secrets``, read at each write, so a
    secret learnt later counts too) in whatever is written to it: Hydra's own errors echo the override they could
    not apply (a key without ``+``, a syntax error), before any run code or log record exists."""

    def __init__(self, stream: Any):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(scrub(text))

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding...: the stream's own
        return getattr(self._stream, name)


def protect_console(arguments: list[str]) -> None:
    """This process's stdout and stderr lose the secrets of its command line and of its environment (called first
    by the entry point, and by each job process a launcher starts)."""
    overrides = [a for a in arguments if "=" in a]
    redact_logs(secret_values(overrides) + environment_secrets(overrides))
    if _LOG_SECRETS:
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if stream is not None and not isinstance(stream, RedactingStream):
                setattr(sys, name, RedactingStream(stream))


def protect_command_line(overrides: list[str], run_dir: Path | None) -> list[str]:
    """A secret given on the command line reaches no file: the process's own arguments (which W&B records as the
    run's metadata) lose it before anything else reads them, every log record from now on has it replaced (as have
    the values of secret-looking environment variables), and Hydra's dumps in ``run_dir`` (None: another process
    writes them) are scrubbed. Returns the command line's secret values."""
    secrets = secret_values(overrides)
    sys.argv[1:] = redact_overrides(sys.argv[1:])
    redact_logs(secrets + environment_secrets(overrides))
    if run_dir is not None:
        scrub_hydra_files(run_dir, secrets)
    return secrets


# --- a sweep's jobs get their secrets through the environment ------------------------------------------------------
def through_environment(overrides: list[str], variables: dict[str, str]) -> list[str]:
    """``overrides`` with each secret value written ``${oc.env:SOCRATIC_EXP_SECRET_<n>}`` (a secret-looking key's
    value, or a secret-looking entry of a dict value), and ``variables`` given the values (one variable per distinct
    value, ``{name: value}``). A job composed from these overrides, with ``variables`` in its environment, gets the
    same config (a value that Hydra would read as a number becomes its text). A value that is itself an
    interpolation (``${oc.env:MY_TOKEN}``, the way to keep a secret off the command line) is kept as it is."""
    return [_through_environment(override, variables) for override in overrides]


def _through_environment(override: str, variables: dict[str, str]) -> str:
    key, sep, value = override.partition("=")
    if not sep or not value or value.strip("'\"") in ("", "null", "None"):
        return override
    if is_secret_key(key):
        parsed = _parsed_value(override)
        if not isinstance(parsed, dict | list):  # the whole value: quoting and escapes are Hydra's to undo
            text = value.strip("'\"") if parsed is _UNPARSED else str(parsed)
            return override if "${" in text else f"{key}={_reference(text, variables)}"
        leaves = _leaves(parsed, secret=True)
    elif value.lstrip().startswith(("{", "[")):
        leaves = _secret_leaves(value)
    else:
        return override
    for leaf in sorted((leaf for leaf in leaves if "${" not in leaf), key=len, reverse=True):
        value = value.replace(leaf, _reference(leaf, variables))
    return f"{key}={value}"


def _reference(secret: str, variables: dict[str, str]) -> str:
    """``${oc.env:SOCRATIC_EXP_SECRET_<n>}`` for ``secret``, the variable added to ``variables`` if new."""
    name = next((n for n, v in variables.items() if v == secret), None)
    if name is None:
        name = f"{SECRET_VARIABLE}{len(variables)}"
        variables[name] = secret
    return "${oc.env:" + name + "}"


_UNPARSED = object()


def _parsed_value(override: str) -> Any:
    """An override's value as Hydra parses it (``_UNPARSED`` where Hydra cannot: its own error will say so)."""
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        return OverridesParser.create().parse_override(override).value()
    except Exception:
        return _UNPARSED


def _leaves(node: Any, secret: bool) -> set[str]:
    """The scalar entries of a parsed value under a secret-looking key (every entry, where ``secret``)."""
    if isinstance(node, dict):
        return set().union(*(_leaves(v, secret or is_secret_key(k)) for k, v in node.items()))
    if isinstance(node, list):
        return set().union(*(_leaves(v, secret) for v in node))
    return {str(node)} if secret and node not in (None, "") else set()


def config_through_environment(config: Any, variables: dict[str, str], secrets: list[str]) -> Any:
    """A copy of a sweep's config (as a launcher pickles it for its jobs) without ``secrets``: Hydra's own overrides
    (``hydra.overrides.hydra``, which each job is composed with) through the environment (``through_environment``),
    the rest (the sweep's overrides, the composed values, ``hydra.job.override_dirname``) with the secrets replaced by
    ``<redacted>``: each job composes its own config from its own overrides. Resolver caches (the sweep folder's
    time stamp, which the jobs share) are kept."""
    import copy

    from omegaconf import DictConfig, ListConfig, OmegaConf, flag_override

    clean = copy.deepcopy(config)
    overrides = OmegaConf.select(clean, "hydra.overrides", default=None)
    for kind, rewrite in (("hydra", lambda o: through_environment(o, variables)), ("task", redact_overrides)):
        listed = overrides.get(kind) if isinstance(overrides, DictConfig) else None
        if isinstance(listed, ListConfig):
            raw = [str(listed._get_node(i)._value()) for i in range(len(listed))]
            with flag_override(listed, "readonly", False):
                for i, text in enumerate(rewrite(raw)):
                    if text != raw[i]:
                        listed[i] = text
    hidden = sorted({*secrets, *variables.values()}, key=len, reverse=True)

    def walk(node: Any) -> None:
        for key in list(node.keys()) if isinstance(node, DictConfig) else range(len(node)):
            child = node._get_node(key)
            if isinstance(child, DictConfig | ListConfig):
                if child is not overrides:
                    walk(child)
                continue
            raw = child._value()
            if isinstance(raw, str) and any(secret in raw for secret in hidden):
                for secret in hidden:
                    raw = raw.replace(secret, REDACTED)
                with flag_override(node, ["readonly", "struct"], False):
                    node[key] = raw

    if hidden:
        walk(clean)
    return clean


def singleton_state_through_environment(
    state: dict[str, Any], variables: dict[str, str], secrets: list[str]
) -> dict[str, Any]:
    """Hydra's global state as a launcher hands it to each job (``Singleton.get_state()``, a copy), with the configs
    it holds (``HydraConfig``'s: the sweep's overrides) through ``config_through_environment``."""
    from omegaconf import DictConfig

    for instance in state.get("instances", {}).values():
        for name, value in list(vars(instance).items()):
            if isinstance(value, DictConfig):
                setattr(instance, name, config_through_environment(value, variables, secrets))
    return state


def leaked_secrets(data: bytes, secrets: list[str]) -> list[str]:
    """The ``secrets`` that the bytes of a file about to be written (a pickle: its strings are UTF-8) hold."""
    return [secret for secret in secrets if secret and secret.encode() in data]
