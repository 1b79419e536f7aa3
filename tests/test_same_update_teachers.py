"""The teacher-guided methods make the same update on two processes as on one (issue 33), with real gloo processes
started by torchrun: SDPO, VPD (its E-step too), ``sampler=goldilocks`` and Socratic-RL (its loop and distillers).

Each test launches a worker (``tests/distributed/same_update_*.py``) once on one process with the whole of a fixed
batch and once on two processes that split it by rows, as TRL splits a generation batch; the workers write what
each process computed. Batch-level quantities are defined over the whole batch (the papers' means, shares and
counts), so both processes must hold the one-process values; and where DDP averages the gradients, both processes
must hold the one-process gradient (to float tolerance: the two halves are summed in another order).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from math import sqrt
from pathlib import Path
from typing import Any

import pytest
import torch
from launch_helpers import torchrun

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


def launch(worker: str, tmp_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The worker on one process and on two (launched side by side); what process 0 of the one-process run and
    each process of the two-process run wrote."""
    folders = {n: tmp_path / f"processes-{n}" for n in (1, 2)}
    for folder in folders.values():
        folder.mkdir()
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(torchrun, worker, str(folder), processes=n) for n, folder in folders.items()]
        for run in runs:
            run.result()
    one = torch.load(folders[1] / "rank0.pt", weights_only=False)
    two = [torch.load(folders[2] / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]
    return one, two


def assert_same(actual: Any, expected: Any) -> None:
    """Equal to float tolerance: a relative 1e-5, and an absolute 1e-5 of the largest magnitude (tensors), so that
    entries near zero may carry the rounding of the larger ones they were summed with."""
    if isinstance(expected, torch.Tensor):
        scale = float(expected.abs().max()) if expected.numel() else 0.0
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5 * scale)
    else:
        assert actual == pytest.approx(expected, rel=1e-5, abs=1e-7)


def assert_same_metrics(actual: dict[str, Any], expected: dict[str, Any], leave_out: tuple[str, ...] = ()) -> None:
    kept = {k: v for k, v in expected.items() if not k.endswith(leave_out)}
    assert kept and set(kept) <= set(actual), (sorted(kept), sorted(actual))
    for name, value in kept.items():
        assert actual[name] == pytest.approx(value, rel=1e-5, abs=1e-7), name


def test_sdpo_losses_and_statistics_are_the_same_on_two_processes(tmp_path):
    """SDPO on a batch whose processes hold 3 and 4 distilled rollouts of different lengths: every loss aggregation
    and hybrid gives the one-process gradient, and every statistic the one-process value.

    Normalisation: TRL's SDPO (``sequence_mean``) averages per rollout, then over each process's rollouts; DDP's mean
    over processes makes that the batch's mean because every process holds as many rollouts (TRL's batches do).
    TRL's GRPO loss (``dapo``: the ``joint`` hybrid and the teacher-guided advantages) divides each process's token sum
    by the batch's token count (``num_items_in_batch``, gathered) over the processes: global. Ours, ``token_mean``
    (the official code's mean over distilled tokens), divided by each process's own count: the mean of the processes'
    means, not the batch's. It now divides by the batch's count; and the statistics (teacher-student KL, teacher
    entropy, reward margin, the feedback shares, the logged loss), which were each process's own, are now computed
    from sums and counts added up across processes (this test failed on both before)."""
    one, two = launch("same_update_sdpo.py", tmp_path)
    # the batch by hand: 7 of 8 rollouts have a demonstration (the lone success of the first group has none), the
    # 5 failures the verifier's feedback, and each group a success
    hand = {"usable_feedback_share": 7 / 8, "solution_share": 7 / 8, "critique_share": 5 / 8, "success_group_share": 1}
    for name, value in hand.items():
        assert one["contexts"]["metrics"][f"self_distillation/{name}"] == [value]
    for process in two:
        assert process["contexts"]["metrics"] == one["contexts"]["metrics"]
    for case in ("sequence_mean", "token_mean", "joint", "advantage_reshaping", "reweighting"):
        expected = one[case]
        assert float(expected["gradient"].norm()) > 0, case
        assert torch.equal(two[0][case]["gradient"], two[1][case]["gradient"]), case  # DDP's all-reduce
        for process in two:
            assert_same(process[case]["gradient"], expected["gradient"])
            assert process[case]["metrics"].keys() == expected["metrics"].keys(), case
            for name, values in expected["metrics"].items():
                assert_same(process[case]["metrics"][name], values)
        if expected["advantages"] is not None:  # per rollout: each process's rows are the batch's
            assert_same(torch.cat([process[case]["advantages"] for process in two]), expected["advantages"])


def test_vpd_e_step_and_m_step_are_the_same_on_two_processes(tmp_path):
    """VPD's E-step on a batch whose processes hold 1 success and 3 failures, and 2 and 2: its counts, delta, each
    side's mean in BCO's loss, its telemetry and its gradient are the whole batch's, so the teacher's update (SGD:
    minus the gradient) is the one-process update, and the trainer's own E-step (AdamW, clipped) leaves the same
    weights on both processes, bit for bit. Before, each process ran the E-step on its own rows with its own
    delta and means, and its optimizer (outside DDP) stepped with its own gradient: the shared weights of the two
    processes parted (this test failed). The M-step (VPD's token mean) gives the one-process gradient."""
    one, two = launch("same_update_vpd.py", tmp_path)
    telemetry = one["e_step_sgd"]["telemetry"]
    assert (telemetry["successes"], telemetry["failures"], telemetry["skipped"]) == (3.0, 5.0, 0.0)  # by hand
    assert float(one["e_step_sgd"]["update"].norm()) > 0
    for key, field in (("e_step_sgd", "update"), ("e_step_adamw", "weights"), ("m_step", "gradient")):
        assert torch.equal(two[0][key][field], two[1][key][field]), key
        for process in two:
            assert_same(process[key][field], one[key][field])
    for process in two:
        for key in ("e_step_sgd", "e_step_adamw"):
            assert_same_metrics(process[key]["telemetry"], one[key]["telemetry"])
        assert_same_metrics(process["m_step"]["metrics"], one["m_step"]["metrics"])


def flat_state(state: Any, path: str = "") -> dict[str, Any]:
    """A nested state as {path: leaf} (tensors, numbers, strings)."""
    if isinstance(state, dict):
        return {k: v for key, value in state.items() for k, v in flat_state(value, f"{path}/{key}").items()}
    if isinstance(state, list | tuple):
        return {k: v for i, value in enumerate(state) for k, v in flat_state(value, f"{path}/{i}").items()}
    return {path: state}


def test_goldilocks_predictor_is_one_state_on_every_process(tmp_path):
    """``sampler=goldilocks`` through three batches with a refit after each: both processes choose the same prompts,
    hold the same replay buffer (every process's rewards: the feedback hook gathers them) and, after the refits, the
    same predictor (weights, Adam state, the refit in flight), bit for bit, and the same as one process. Already so:
    the sampler gathers every process's rewards before it learns (``samplers.base.gathered``)."""
    one, two = launch("same_update_goldilocks.py", tmp_path)
    utility = sqrt(0.25 * 0.75)  # y = sqrt(p (1 - p)) of 1 success in 4
    assert one["state"]["buffer_targets"].tolist() == pytest.approx([utility, 0.5, 0.0, 0.0, 0.5, utility])
    assert one["state"]["fits"] == 3
    expected = flat_state(one["state"])
    del expected["/finished_fit/2"]  # the refit's duration
    for process in two:
        assert process["chosen"] == one["chosen"]
        state = flat_state(process["state"])
        assert set(expected) <= set(state)
        for path, value in expected.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(state[path], value), path
            else:
                assert state[path] == value, path
        assert_same_metrics(process["metrics"], one["metrics"], leave_out=("_ms",))


def test_socratic_rl_loop_and_distillers_are_the_same_on_two_processes(tmp_path):
    """Socratic-RL's reflection chooses from the whole batch (its group means, ``reflections_per_step``) and files
    the same viewpoints on both processes; U(v) is measured on every probe item (already so: the loop gathers the
    batch's traces and the probe's scores); and one step of each distiller (kl: TRL's SDFT, dpo, sft) gives the
    one-process update on both processes.

    Normalisation, all TRL's (or transformers'): SDFT averages per sequence, then over each process's rows; DPO
    averages over each process's pairs; both are the batch's mean under DDP's mean because every process holds as
    many rows. SFT divides by the batch's token count (transformers' ``average_tokens_across_devices``): global.
    SFT's ``loss_before`` / ``loss_after`` are transformers' evaluation loss, the mean of each evaluation batch's
    token mean, so they depend on how the rows fall into batches and are left out here. Before: a distiller's
    ``batch_size`` was per process (twice the examples per step on two processes), and SFT trained without DDP
    after its evaluation (each process stepped with its own share's gradient) (this test failed on both)."""
    one, two = launch("same_update_socratic_rl.py", tmp_path)
    # by hand: the group means are 1/4 and 1/2, and 3 + 2 traces lie below them
    assert one["reflection"]["metrics"]["socratic_rl/reflections"] == 5.0
    assert one["reflection"]["kb"]["entries"]
    for process in two:
        for phase in ("reflection", "probe"):
            assert process[phase]["kb"] == one[phase]["kb"], phase
            assert_same_metrics(process[phase]["metrics"], one[phase]["metrics"], leave_out=("seconds",))
    for name in ("kl", "dpo", "sft"):
        assert float(one[name]["update"].norm()) > 0, name
        assert torch.equal(two[0][name]["update"], two[1][name]["update"]), name
        for process in two:
            assert_same(process[name]["update"], one[name]["update"])
            evaluation = ("loss_before", "loss_after") if name == "sft" else ()
            assert_same_metrics(process[name]["metrics"], one[name]["metrics"], leave_out=("seconds", *evaluation))
