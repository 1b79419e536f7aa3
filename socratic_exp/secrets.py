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
- the console: ``protect_console`` (Hydra's own errors echo an override before any run code exists).
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


_LOG_SECRETS: list[str] = []


def redact_logs(secrets: list[str]) -> None:
    """Every log record created from now on in this process has ``secrets`` replaced, whatever logger or handler
    writes it (console and log file alike): a library, or Hydra's own launchers (``#0 : <overrides>``), logging a
    secret given on the command line. A record factory, since Hydra re-configures logging (and its handlers)."""
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
                for secret in _LOG_SECRETS:
                    message = message.replace(secret, REDACTED)
                record.msg, record.args = message, None
            return record

        logging.setLogRecordFactory(redacting_factory)
    _LOG_SECRETS.extend(fresh)
    _LOG_SECRETS.sort(key=len, reverse=True)


class RedactingStream:
    """A console stream that replaces ``secrets`` in whatever is written to it: Hydra's own errors echo the override
    they could not apply (a key without ``+``, a syntax error), before any run code or log record exists."""

    def __init__(self, stream: Any, secrets: list[str]):
        self._stream, self._secrets = stream, secrets

    def write(self, text: str) -> int:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding...: the stream's own
        return getattr(self._stream, name)


def protect_console(arguments: list[str]) -> None:
    """This process's stdout and stderr lose the secrets of its command line (called first by the entry point)."""
    secrets = secret_values([a for a in arguments if "=" in a])
    if secrets:
        sys.stdout, sys.stderr = RedactingStream(sys.stdout, secrets), RedactingStream(sys.stderr, secrets)


def protect_command_line(overrides: list[str], run_dir: Path | None) -> list[str]:
    """A secret given on the command line reaches no file: the process's own arguments (which W&B records as the
    run's metadata) lose it before anything else reads them, every log record from now on has it replaced, and Hydra's
    dumps in ``run_dir`` (None: another process writes them) are scrubbed. Returns the secret values."""
    secrets = secret_values(overrides)
    sys.argv[1:] = redact_overrides(sys.argv[1:])
    redact_logs(secrets)
    if run_dir is not None:
        scrub_hydra_files(run_dir, secrets)
    return secrets
