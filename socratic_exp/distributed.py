"""The processes of a distributed launch (``torchrun``, ``accelerate launch``): who writes, and the collectives that
keep them in step.

Every process runs the same code; only the main one (``RANK`` 0) writes the run folder, the logger and the console.
Work split across processes (the held-out evaluation) is gathered back in the order of a single process, and a loop
whose length depends on the data (attempts with a teacher) runs as many rounds, with as many rows, on every process:
under ZeRO-3, FSDP and vLLM's server mode each forward or generation call is a collective, so processes that made
different calls would wait for each other forever.

Heavy imports (torch) stay inside the functions: composing a config imports this module.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def rank() -> int:
    """This process's global rank: from the launcher's environment, so it is known before any process group."""
    return int(os.environ.get("RANK", "0"))


def is_main() -> bool:
    return rank() == 0


def launched_processes() -> int:
    """How many processes the launcher started (``WORLD_SIZE``), whether or not they have joined a group yet."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def join() -> None:
    """Join the launch's process group now (as TRL's arguments will, with the same backend: gloo without a GPU), so
    that work before the trainer exists, the first evaluation, is already split across processes."""
    if launched_processes() > 1:
        import torch
        from accelerate import PartialState

        PartialState(cpu=not torch.cuda.is_available())


def world_size() -> int:
    """The processes in the group (1 without one)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def my_share(count: int) -> tuple[list[int], int]:
    """This process's share of ``count`` items, strided (process r takes r, r + N, ...), padded by repeating its last
    item (item 0 where it has none) to ``ceil(count / N)`` so that every process does the same amount of work; and
    how many of the indices are its own (the rest are padding, whose results are dropped)."""
    import torch.distributed as dist

    processes = world_size()
    if processes == 1:
        return list(range(count)), count
    mine = list(range(dist.get_rank(), count, processes))
    width = -(-count // processes)
    return mine + [mine[-1] if mine else 0] * (width - len(mine)), len(mine)


def gather_shares(count: int, local: Sequence[T]) -> list[T]:
    """The per-item results of every process's ``my_share(count)`` (its own items only), in item order: the list
    a single process would have computed."""
    import torch.distributed as dist

    processes = world_size()
    if processes == 1:
        return list(local)
    shares: list[Any] = [None] * processes
    dist.all_gather_object(shares, list(local))
    merged: list[Any] = [None] * count
    for process, share in enumerate(shares):
        merged[process::processes] = share
    return merged


def gather_objects(local: T) -> list[T]:
    """``local`` of every process, in rank order."""
    import torch.distributed as dist

    if world_size() == 1:
        return [local]
    every: list[Any] = [None] * world_size()
    dist.all_gather_object(every, local)
    return every


def most_on_any_process(count: int) -> int:
    """The largest ``count`` over the processes: pad a data-dependent batch or loop to it."""
    return max(gather_objects(count))


@contextlib.contextmanager
def full_parameters(model: Any) -> Iterator[None]:
    """The model's whole parameters inside the block: DeepSpeed ZeRO-3 keeps each process's partition only, and
    gathers them here (FSDP2 gathers in its own forward hooks, and plain or DDP models hold them already)."""
    partitioned = [p for p in model.parameters() if hasattr(p, "ds_id")]
    if not partitioned:
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(partitioned, modifier_rank=None):
        yield


def launch_layout(trainer: Any) -> dict[str, Any]:
    """How the trainer's processes run (recorded in ``summary.json``): their number and accelerate's distributed
    type. FSDP asked for but not applied is an error: accelerate applies it to GPU processes only, and on CPU
    (``MULTI_CPU``) it would train with plain data parallelism without a word."""
    from socratic_exp.errors import UserError

    accelerator = trainer.accelerator
    kind = accelerator.distributed_type.value
    if getattr(trainer.args, "fsdp", None) and kind != "FSDP":
        raise UserError(
            f"FSDP was asked for (algorithm.trl_args.fsdp) but accelerate runs these processes as {kind}: it "
            "applies FSDP on GPUs only",
            "drop +algorithm.trl_args.fsdp on CPU; on GPUs launch with launch/accelerate/fsdp2.yaml",
        )
    return {"processes": accelerator.num_processes, "distributed_type": kind}


def peak_memory() -> dict[str, float]:
    """This process's peak memory so far, in GiB (recorded in ``summary.json``): the CPU's resident set and, on a
    GPU, torch's peak allocation and reservation on the current device (the planner's figures, measured)."""
    import resource
    import sys

    import torch

    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 if sys.platform != "darwin" else 1024)
    peak = {"cpu_rss_gib": round(kib / 2**20, 3)}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        peak["gpu_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
        peak["gpu_reserved_gib"] = round(torch.cuda.max_memory_reserved() / 2**30, 3)
    return peak


def from_main(value: T) -> T:
    """The main process's ``value`` on every process: what only the main one computes (a teacher's reply)."""
    import torch.distributed as dist

    if world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def summed(accelerator: Any, *values: Any) -> list[float]:
    """Each value (a number or a one-element tensor) summed over the processes, in one all-reduce on the
    accelerator's device (float64: counts stay exact); on one process, the values themselves. Every process must call
    it at the same point."""
    import torch

    local = torch.tensor([float(v) for v in values], dtype=torch.float64, device=accelerator.device)
    if accelerator.num_processes > 1:
        local = accelerator.reduce(local, reduction="sum")
    return local.tolist()
