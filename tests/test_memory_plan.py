"""The memory planner (``socratic_exp.models.memory``): every expected figure below is worked out by hand from the
models' layer shapes and the precision rules (the arithmetic is in the comments), never by the planner itself.

Layer shapes used (the Qwen3 presets from their published config.json; the tiny model from its settings):
- tiny (Qwen2, tied embeddings): vocabulary 99 (3 special tokens, 95 printable ASCII characters, newline), hidden 128,
  4 layers, 4 heads of 32 with 4 KV heads (q/k/v 128 -> 128 with biases, o 128 -> 128 without), MLP 384.
- Qwen3 (no biases; q_norm and k_norm of head_dim 128 per layer; two RMSNorms of hidden per layer; a final norm):
  1.7B: hidden 2048, 28 layers, 16 heads x 128 (q out 2048), 8 KV heads x 128 (k, v out 1024), MLP 6144, tied.
  4B-Instruct-2507: hidden 2560, 36 layers, 32 heads x 128 (q out 4096), 8 KV heads (k, v out 1024), MLP 9728, tied.
  8B: hidden 4096, 36 layers, 32 heads (q out 4096), 8 KV heads (k, v out 1024), MLP 12288, untied LM head.
  Vocabulary 151936.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import compose

from socratic_exp.runtime.assembly import build_components

pytest.importorskip("torch")
pytest.importorskip("transformers")

GiB = 2**30

# tiny: embeddings 99 * 128 = 12,672.
# a layer: q, k, v 128 * 128 + 128 = 16,512 each (49,536); o 128 * 128 = 16,384; attention 65,920.
#          MLP gate, up, down 128 * 384 = 49,152 each: 147,456. Two RMSNorms: 256. Layer: 213,632.
# 4 layers: 854,528; final norm 128; LM head tied (0). Total 12,672 + 854,528 + 128 = 867,328.
TINY = 867_328

# Qwen3-1.7B: embeddings 151,936 * 2048 = 311,164,928.
# a layer: q 2048 * 2048 = 4,194,304; k, v 2048 * 1024 = 2,097,152 each; o 2048 * 2048 = 4,194,304;
#          q_norm + k_norm 256: attention 12,583,168. MLP 3 * 2048 * 6144 = 37,748,736. Norms 4096. Layer 50,336,000.
# 28 layers: 1,409,408,000; final norm 2048; tied head. Total 311,164,928 + 1,409,408,000 + 2048 = 1,720,574,976.
QWEN3_1_7B = 1_720_574_976

# Qwen3-4B(-Instruct-2507): embeddings 151,936 * 2560 = 388,956,160.
# a layer: q 2560 * 4096 = 10,485,760; k, v 2560 * 1024 = 2,621,440 each; o 4096 * 2560 = 10,485,760; norms 256:
#          attention 26,214,656. MLP 3 * 2560 * 9728 = 74,711,040. Norms 5120. Layer 100,930,816.
# 36 layers: 3,633,509,376; final norm 2560; tied head. Total 388,956,160 + 3,633,509,376 + 2560 = 4,022,468,096.
QWEN3_4B = 4_022_468_096

# Qwen3-8B: embeddings and the untied LM head 151,936 * 4096 = 622,329,856 each (1,244,659,712).
# a layer: q, o 4096 * 4096 = 16,777,216 each; k, v 4096 * 1024 = 4,194,304 each; norms 256: 41,943,296.
#          MLP 3 * 4096 * 12288 = 150,994,944. Norms 8192. Layer 192,946,432.
# 36 layers: 6,946,071,552; final norm 4096. Total 1,244,659,712 + 6,946,071,552 + 4096 = 8,190,735,360.
QWEN3_8B = 8_190_735_360


def plan(*overrides: str, **settings):
    from socratic_exp.models.memory import plan_memory

    return plan_memory(build_components(compose(*overrides)), **settings)


def by_key(memory_plan) -> dict:
    return {row.key: row for row in memory_plan.rows}


def test_importing_the_planner_imports_no_torch():
    code = (
        "import sys, socratic_exp.models.memory; "
        "print(sorted(m for m in ('torch', 'transformers', 'peft', 'trl') if m in sys.modules))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[]"


# --- (a) the tiny model with GRPO: float32 everything ---------------------------------------------------------------
def test_tiny_grpo_is_float32_weights_gradients_and_moments():
    memory = plan("model=tiny", "algorithm=grpo", device="cuda_bf16")
    assert memory.parameters == TINY
    rows = by_key(memory)
    assert set(rows) == {"weights", "gradients", "optimizer"}  # beta = 0: no reference model; no vLLM
    assert rows["weights"].dtype == "float32"  # its checkpoint's dtype, bf16 autocast or not
    assert rows["weights"].per_process == 3_469_312  # 867,328 * 4
    assert rows["gradients"].per_process == 3_469_312  # float32 gradients of float32 weights
    assert rows["optimizer"].per_process == 6_938_624  # 2 moments * 867,328 * 4
    assert memory.held() == 13_877_248  # 3,469,312 * 2 + 6,938,624
    assert memory.precision.mixed_precision == "bf16"  # algorithm.bf16=null on a GPU with bf16: autocast only


def test_two_ddp_processes_add_the_gradient_buckets_and_double_the_total():
    memory = plan("model=tiny", "algorithm=grpo", processes=2, device="cuda_bf16")
    rows = by_key(memory)
    assert rows["ddp_buckets"].per_process == 3_469_312  # one more float32 gradient-sized buffer
    assert memory.held() == 17_346_560  # 13,877,248 + 3,469,312
    assert rows["weights"].total == 6_938_624  # a whole copy on each of the 2 processes


# --- (b) SocraticPO's SciKnowEval setting: Qwen3-4B-Instruct-2507 in bf16 ------------------------------------------
def test_socraticpo_sciknoweval_in_bf16_with_its_kl_copy_and_vllm():
    memory = plan("experiment=socraticpo_sciknoweval", device="cuda_bf16")
    assert memory.model == "Qwen/Qwen3-4B-Instruct-2507"
    assert memory.parameters == QWEN3_4B
    rows = by_key(memory)
    weights = 8_044_936_192  # 4,022,468,096 * 2 bytes (bf16: model.dtype=auto on a GPU with bf16)
    assert rows["weights"].dtype == "bfloat16" and rows["weights"].per_process == weights
    assert rows["gradients"].dtype == "bfloat16" and rows["gradients"].per_process == weights
    assert rows["optimizer"].dtype == "bfloat16" and rows["optimizer"].per_process == 16_089_872_384  # 2 * 2 bytes
    # the reinforce_pp backend's KL to the initial policy (kl_coef null -> 0.01): a frozen bf16 copy
    assert rows["initial_policy"].per_process == weights and rows["initial_policy"].held
    # vLLM colocate: its own 16-bit copy, shown but inside vLLM's gpu_memory_utilization share
    assert rows["vllm"].per_process == weights and not rows["vllm"].held
    assert "reference" not in rows  # beta = 0 with the reinforce_pp backend
    assert not any(row.source == "teacher" for row in memory.rows)  # the 27B teacher is served elsewhere
    assert memory.held() == 40_224_680_960  # 8,044,936,192 * (1 + 1 + 2 + 1)
    assert round(memory.held() / GiB, 2) == 37.46


# --- (c) Qwen3-1.7B with GRPO and beta = 0.04: LoRA, then ZeRO-3 over 8 processes ---------------------------------
def test_qwen3_1_7b_lora_trains_float32_adapters_and_needs_no_reference_copy():
    memory = plan("model=qwen3_1_7b", "algorithm=grpo", "algorithm.beta=0.04", "model.lora.r=16", device="cuda_bf16")
    rows = by_key(memory)
    assert memory.parameters == QWEN3_1_7B
    assert rows["weights"].per_process == 3_441_149_952 and not rows["weights"].trainable  # 1,720,574,976 * 2
    # all-linear adapters, r = 16, per layer r * (in + out): q 16 * (2048 + 2048) = 65,536; k, v 16 * (2048 + 1024)
    # = 49,152 each; o 65,536; gate, up 16 * (2048 + 6144) = 131,072 each; down 131,072: 622,592 a layer, 28 layers.
    adapters = 17_432_576
    assert rows["adapters"].parameters == adapters
    assert rows["adapters"].dtype == "float32"  # peft upcasts adapters on a bf16 base (TRL's get_peft_model call)
    assert rows["adapters"].per_process == 69_730_304  # 17,432,576 * 4
    assert rows["gradients"].per_process == 69_730_304
    assert rows["optimizer"].per_process == 139_460_608  # 2 * 17,432,576 * 4
    assert rows["reference"].per_process == 0  # the base model with the adapters disabled
    assert memory.held() == 3_720_071_168  # 3,441,149,952 + 69,730,304 * 2 + 139,460,608


def test_qwen3_1_7b_zero3_over_8_processes_shards_weights_gradients_optimizer_and_trls_reference():
    memory = plan(
        "model=qwen3_1_7b",
        "algorithm=grpo",
        "algorithm.beta=0.04",
        processes=8,
        zero_stage=3,
        mixed_precision="bf16",
        device="cuda_bf16",
    )
    rows = by_key(memory)
    shard = 430_143_744  # 1,720,574,976 * 2 bytes / 8
    assert rows["weights"].per_process == shard
    assert rows["gradients"].per_process == shard
    assert rows["optimizer"].per_process == 2_580_862_464  # 1,720,574,976 * 12 bytes (fp32 master + 2 moments) / 8
    assert rows["reference"].per_process == shard  # TRL's reference goes through DeepSpeed: ZeRO-3 shards it
    assert "ddp_buckets" not in rows
    assert memory.held() == 3_871_293_696  # 430,143,744 * 3 + 2,580,862,464
    assert rows["optimizer"].total == 20_646_899_712  # 1,720,574,976 * 12 over the 8 processes


def test_a_cpu_run_loads_a_hub_model_in_float32():
    rows = by_key(plan("model=qwen3_1_7b", "algorithm=grpo", device="cpu"))
    assert rows["weights"].dtype == "float32" and rows["weights"].per_process == 6_882_299_904  # 1,720,574,976 * 4
    assert rows["optimizer"].per_process == 13_764_599_808  # 2 * 6,882,299,904
    assert rows["weights"].where == "CPU"


def test_qwen3_8b_counts_its_untied_head():
    memory = plan("model=qwen3_8b", "algorithm=grpo", device="cuda_bf16")
    assert memory.parameters == QWEN3_8B


# --- each option's copies --------------------------------------------------------------------------------------------
def test_sdpo_teacher_copy_and_vpd_shared_teacher_with_its_e_step_optimizer():
    sdpo = by_key(plan("algorithm=sdpo", device="cuda_bf16"))  # teacher_weights=copy, EMA
    assert sdpo["teacher"].per_process == 3_469_312  # a float32 copy of the tiny student: 867,328 * 4
    vpd = by_key(plan("algorithm=vpd", device="cuda_bf16"))  # teacher_weights=shared, dynamic prior
    assert vpd["teacher"].per_process == 0
    assert vpd["e_step_moments"].per_process == 6_938_624  # its own AdamW over the student's weights: 2 * 867,328 * 4
    assert "reference_prior" not in vpd
    fixed = by_key(plan("algorithm=vpd", "algorithm.reference_prior=fixed", device="cuda_bf16"))
    assert fixed["reference_prior"].per_process == 3_469_312


def test_reinforce_pp_without_kl_keeps_no_copy():
    assert "initial_policy" not in by_key(plan("algorithm=reinforce_pp", "algorithm.kl_coef=0", device="cuda_bf16"))
    assert by_key(plan("algorithm=reinforce_pp", device="cuda_bf16"))["initial_policy"].per_process == 3_469_312


def test_socratic_rl_phases_are_shown_but_not_held():
    memory = plan("algorithm=socratic_rl", "teacher=llm", "distiller=kl", device="cuda_bf16")
    rows = by_key(memory)
    # the self-guiding teacher gets a copy of the student (meta-learning trains it, so it ends on the GPU)
    assert rows["teacher"].per_process == 3_469_312 and rows["teacher"].held
    assert rows["distill_snapshot"].phase and not rows["distill_snapshot"].held
    # held: the student's 13,877,248 and the teacher copy's 3,469,312
    assert memory.held() == 17_346_560
    # the largest phase, a meta-update: gradients 3,469,312 + moments 6,938,624 + DPO reference 3,469,312
    assert memory.peak() == 17_346_560 + 13_877_248


def test_self_guidance_shares_the_students_weights():
    rows = by_key(plan("algorithm=socraticpo", "teacher=llm", device="cuda_bf16"))
    assert rows["teacher"].per_process == 0


def test_an_unknown_uncached_hub_model_is_one_row_saying_so():
    memory = plan("model=qwen3_0_6b", "model.name=nobody-here/no-such-model-7b", device="cuda_bf16")
    assert memory.parameters is None
    [row] = memory.rows
    assert row.per_process is None
    assert "not in the Hugging Face cache" in row.note
    table = memory.table()
    assert "nobody-here/no-such-model-7b" in table and "unknown" in table


def test_the_table_says_what_it_leaves_out():
    table = plan("experiment=socraticpo_sciknoweval", device="cuda_bf16").table()
    assert "4,022,468,096" in table and "37.46 GiB" in table
    assert "NOT included: activations" in table
    for words in ("KV", "vllm_gpu_memory_utilization", "[not in total]"):
        assert words in table


def test_launch_settings_read_what_accelerate_launch_sets():
    from socratic_exp.models.memory import launch_settings

    zero3 = {"WORLD_SIZE": "8", "ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3",
             "ACCELERATE_MIXED_PRECISION": "bf16"}  # fmt: skip
    assert launch_settings(zero3) == {"processes": 8, "zero_stage": 3, "mixed_precision": "bf16"}
    assert launch_settings({}) == {"processes": 1, "zero_stage": None, "mixed_precision": None}


def test_dry_run_prints_the_plan_and_the_command_plans_a_gpu_launch_from_here(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "SOCRATIC_EXP_OUTPUTS": str(tmp_path)}
    dry = subprocess.run([sys.executable, "-m", "socratic_exp", "dry_run=true", "logger=none"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert dry.returncode == 0, dry.stderr[-2000:]
    lines = dry.stdout.splitlines()
    assert lines[0].startswith("Memory plan: model=tiny (TinyModel), ") and lines[-1].startswith("config OK: ")
    assert any(line.startswith("TOTAL held (CPU)") for line in lines)
    planned = subprocess.run(
        [sys.executable, "-m", "socratic_exp.models.memory", "model=qwen3_1_7b", "algorithm=grpo", "--device",
         "cuda_bf16", "--processes", "8", "--zero-stage", "3"], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr[-2000:]
    assert "8 processes (ZeRO-3), planned for a CUDA GPU with bf16" in planned.stdout
    bad = subprocess.run([sys.executable, "-m", "socratic_exp.models.memory", "algorithm=nope"], capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr
