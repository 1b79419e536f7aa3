"""LoRA (``model.lora``): what the adapters are, what each algorithm scores with, and what a run saves.

The expectations are worked out by hand from the layer shapes and from models built without peft: the tiny model's
default shapes are hidden 128, MLP 384, 4 layers, 4 heads of 32 (so k/v project 128 -> 128), with tied embeddings.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT, compose, interrupt_after_step_2, run_dirs

from socratic_exp.core.errors import ConfigError
from socratic_exp.core.run_folder import read_metrics, read_summary
from socratic_exp.runtime.assembly import build_components

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

# Per decoder layer with r = 4: q, k, v, o are 128 -> 128, so r * (128 + 128) = 1024 each; gate and up are
# 128 -> 384 and down 384 -> 128, r * (128 + 384) = 2048 each. 4 * 1024 + 3 * 2048 = 10240 per layer, 4 layers.
R4_ALL_LINEAR = 40960
R4_Q_V = 4 * 2 * 1024  # target_modules [q_proj, v_proj]: two 128 -> 128 projections per layer


# --- the config block -------------------------------------------------------------------------------------------
def test_every_model_option_declares_the_whole_lora_block():
    import dataclasses

    import yaml

    from socratic_exp.models.lora import LoRA

    keys = [f.name for f in dataclasses.fields(LoRA)]
    options = sorted((ROOT / "conf" / "model").glob("*.yaml"))
    assert {"tiny", "qwen3_4b"} <= {p.stem for p in options}
    for path in options:
        assert list(yaml.safe_load(path.read_text())["lora"]) == keys, path.name
    for option in ("tiny", "qwen3_0_6b", "qwen3_1_7b", "qwen3_4b", "qwen3_8b"):  # the papers' full fine-tuning
        assert compose(f"model={option}").model.lora.r == 0, option


def test_composing_a_lora_config_imports_neither_peft_nor_torch():
    code = (
        "import sys\n"
        "from socratic_exp.core.config import compose\n"
        "from socratic_exp.runtime.assembly import build_components\n"
        "c = build_components(compose('model.lora.r=8', 'model.lora.target_modules=[q_proj,v_proj]'), {})\n"
        "assert c.model.lora.enabled and c.model.lora.target_modules == ['q_proj', 'v_proj']\n"
        "print(sorted(m for m in ('peft', 'torch', 'transformers', 'trl') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("model.lora.r=-1", "model.lora.r"),
        ("model.lora.alpha=0", "model.lora.alpha"),
        ("model.lora.dropout=1.0", "model.lora.dropout"),
        ("model.lora.target_modules=[]", "model.lora.target_modules"),
        ("+model.lora.rank=4", "model.lora.rank"),
    ],
)
def test_out_of_range_lora_settings_are_refused_by_key(override, key):
    with pytest.raises(ConfigError) as raised:
        build_components(compose(override), {})
    assert raised.value.key == key


def test_peft_config_follows_the_block():
    from socratic_exp.models.lora import LoRA

    assert LoRA().peft_config() is None  # r = 0: full fine-tuning
    config = LoRA(r=4, dropout=0.1, target_modules=["q_proj", "v_proj"]).peft_config()
    assert (config.r, config.lora_alpha, config.lora_dropout) == (4, 8, 0.1)  # alpha null: 2 x r
    assert set(config.target_modules) == {"q_proj", "v_proj"}
    assert LoRA(r=16, alpha=16.0).peft_config().lora_alpha == 16.0
    assert LoRA(r=4).peft_config().target_modules == "all-linear"


# --- GRPO on an untrained tiny model ------------------------------------------------------------------------------
def _tiny():
    from socratic_exp.models.char_tokenizer import build_char_tokenizer
    from socratic_exp.models.tiny import TinyModel

    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    return TinyModel().build_untrained(tokenizer), tokenizer


def _grpo(tmp_path, model, tokenizer, lora, reward=None, **args):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    config = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        max_steps=1,
        report_to=[],
        bf16=False,
        seed=0,
        save_strategy="no",
        gradient_checkpointing=False,
        **args,
    )
    # a reward that differs between the completions of a group, so that the advantages are not all zero
    reward = reward or (lambda completions, **_: [float(sum(map(ord, c)) % 7) for c in completions])
    return GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=config,
        train_dataset=Dataset.from_dict({"prompt": ["1+2="] * 4}),
        processing_class=tokenizer,
        peft_config=lora.peft_config(),
    )


def _trainable(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_trainable_parameters_of_r4_are_the_hand_count(tmp_path):
    from socratic_exp.models.lora import LoRA

    model, tokenizer = _tiny()
    assert _trainable(_grpo(tmp_path, model, tokenizer, LoRA(r=4)).model) == R4_ALL_LINEAR
    model, tokenizer = _tiny()
    trainer = _grpo(tmp_path, model, tokenizer, LoRA(r=4, target_modules=["q_proj", "v_proj"]))
    assert _trainable(trainer.model) == R4_Q_V


def test_a_grpo_step_moves_the_adapters_and_leaves_the_base_weights(tmp_path):
    from socratic_exp.models.lora import LoRA

    model, tokenizer = _tiny()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer = _grpo(tmp_path, model, tokenizer, LoRA(r=4), learning_rate=1e-2)
    trainer.train()
    base, adapters = {}, {}
    for name, p in trainer.model.named_parameters():
        (adapters if "lora_" in name else base)[name] = p.detach()
    assert len(base) == len(before)
    for name, value in base.items():
        plain = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
        assert torch.equal(value, before[plain]), name
    # lora_B starts at zero, so the first step's gradient reaches B only (dL/dA has a factor B)
    moved_b = [n for n, v in adapters.items() if "lora_B" in n and v.abs().sum() > 0]
    assert len(moved_b) == 7 * 4  # every targeted projection of every layer


def _logps(model, ids, keep):
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, :-1].float()
    return logits.log_softmax(-1).gather(-1, ids[:, 1:, None])[:, -keep:, 0]


def _perturb_adapters(model, value=0.05):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name and ".default." in name:
                p.fill_(value)


def test_the_kl_reference_is_the_model_without_adapters_and_no_copy(tmp_path, monkeypatch):
    import socratic_exp.models.base as models_base
    from socratic_exp.models.lora import LoRA

    monkeypatch.setattr(models_base, "frozen_copy", lambda *_: pytest.fail("frozen_copy called"))
    model, tokenizer = _tiny()
    plain = copy.deepcopy(model)
    trainer = _grpo(tmp_path, model, tokenizer, LoRA(r=4), beta=0.1)
    assert trainer.ref_model is None
    _perturb_adapters(trainer.model)  # the student now differs from the base model
    torch.manual_seed(1)
    output = trainer._generate_and_score_completions([{"prompt": "1+2="}] * 4)
    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    keep = output["completion_ids"].size(1)
    mask = output["completion_mask"].bool()
    reference = output["ref_per_token_logps"]
    assert torch.allclose(reference[mask], _logps(plain, ids, keep)[mask], atol=1e-4)
    assert not torch.allclose(reference[mask], _logps(trainer.model, ids, keep)[mask], atol=1e-2)


# --- adapter views, snapshots and the EMA teacher -------------------------------------------------------------------
def _peft(r=4):
    from peft import get_peft_model

    from socratic_exp.models.lora import LoRA

    model, tokenizer = _tiny()
    plain = copy.deepcopy(model)
    return get_peft_model(model, LoRA(r=r).peft_config()), plain, tokenizer


IDS = torch.tensor([[5, 9, 12, 7, 30, 31, 8, 6]])


def test_views_score_with_their_adapter_and_own_only_its_parameters():
    from socratic_exp.models.adapters import AdapterView, adapter_copy, base_view

    model, plain, _ = _peft()
    snapshot = adapter_copy(model, "snapshot")  # a copy of the zero-effect adapter at its start
    _perturb_adapters(model)
    assert torch.allclose(_logps(base_view(model), IDS, 7), _logps(plain, IDS, 7), atol=1e-5)
    assert torch.allclose(_logps(snapshot, IDS, 7), _logps(plain, IDS, 7), atol=1e-5)
    student = _logps(model, IDS, 7)
    assert not torch.allclose(student, _logps(plain, IDS, 7), atol=1e-3)
    assert torch.equal(_logps(AdapterView(model, "default"), IDS, 7), student)
    assert model.active_adapter == "default"
    assert list(base_view(model).parameters()) == []
    assert sum(p.numel() for p in snapshot.parameters()) == R4_ALL_LINEAR
    assert not any(p.requires_grad for p in snapshot.parameters())  # frozen ...
    assert _trainable(model) == R4_ALL_LINEAR  # ... and the student's adapter still the trainable one


def test_the_ema_teacher_adapter_moves_a_share_toward_the_student():
    from socratic_exp.models.adapters import adapter_copy, ema_update

    model, _, _ = _peft()
    teacher = adapter_copy(model, "teacher")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".default." in name:
                p.fill_(1.0)
            elif ".teacher." in name:
                p.fill_(0.2)
    ema_update(teacher, 0.25)
    values = torch.cat([p.flatten() for p in teacher.parameters()])
    assert values.numel() == R4_ALL_LINEAR
    assert torch.allclose(values, torch.full_like(values, 0.75 * 0.2 + 0.25 * 1.0))  # 0.4
    assert all(float(p.min()) == 1.0 for n, p in model.named_parameters() if ".default." in n)  # student untouched


def test_collapse_guard_puts_the_adapter_back_and_a_step_0_snapshot_means_no_adapter():
    from socratic_exp.runtime.evaluation import CollapseGuard

    model, plain, _ = _peft()
    guard = CollapseGuard("acc", margin=0.1, lora=True)
    guard.observe(0, {"acc": 0.5}, plain)  # before the trainer adds the adapters: nothing to keep
    _perturb_adapters(model)
    guard.observe(2, {"acc": 0.1}, model)
    guard.restore(model)
    assert torch.allclose(_logps(model, IDS, 7), _logps(plain, IDS, 7), atol=1e-5)
    _perturb_adapters(model, 0.03)
    guard.observe(4, {"acc": 0.9}, model.get_base_model())  # the wrapped model: the same names
    kept = _logps(model, IDS, 7)
    _perturb_adapters(model, 0.2)
    guard.restore(model)
    assert torch.allclose(_logps(model, IDS, 7), kept, atol=1e-6)


def test_a_merged_save_loads_as_a_plain_model_with_the_same_logits(tmp_path):
    from transformers import AutoModelForCausalLM

    from socratic_exp.models.adapters import save_merged

    model, _, tokenizer = _peft()
    _perturb_adapters(model)
    expected = _logps(model, IDS, 7)
    save_merged(model, tokenizer, tmp_path / "final")
    assert not (tmp_path / "final" / "adapter_config.json").exists()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "final")
    assert not any("lora" in name for name, _ in loaded.named_parameters())
    assert torch.allclose(_logps(loaded, IDS, 7), expected, atol=1e-5)


def test_a_dpo_phase_trains_the_adapter_against_a_ref_adapter_and_removes_it(tmp_path, monkeypatch):
    import socratic_exp.models.base as models_base
    from socratic_exp.models.phases import dpo_phase

    monkeypatch.setattr(models_base, "frozen_copy", lambda *_: pytest.fail("frozen_copy called"))
    model, _, tokenizer = _peft()
    rows = [{"prompt": f"{a}+{a}=", "chosen": f"{2 * a}", "rejected": f"{a}{a}"} for a in range(1, 9)]
    base = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    metrics = dpo_phase(
        model, tokenizer, rows, tmp_path, prefix="distill", steps=2, batch_size=4, learning_rate=1e-2, beta=0.1, seed=0
    )
    assert metrics["distill/steps"] == 2.0
    assert list(model.peft_config) == ["default"]  # TRL's "ref" adapter is gone
    assert all(torch.equal(p, base[n]) for n, p in model.named_parameters() if "lora_" not in n)
    assert any(float(p.abs().sum()) > 0 for n, p in model.named_parameters() if "lora_B" in n)
    assert _trainable(model) == R4_ALL_LINEAR


# --- the algorithms' trainers on the warm-started tiny model --------------------------------------------------------
def _trainer(cache_dir, algorithm, *overrides):
    cfg = compose(
        f"algorithm={algorithm}", "debug=fast", "debug=quick_warmstart", "logger=none", "model.lora.r=4",
        f"model.cache_dir={cache_dir}", *overrides,
    )  # fmt: skip
    from socratic_exp.runtime.assembly import build_trainer, workbench

    bench = workbench(build_components(cfg, {"algorithm": algorithm}))
    return build_trainer(bench, Path(tempfile.mkdtemp())), bench.student


@pytest.mark.slow
def test_sdpo_teachers_share_the_base_weights(cache_dir, monkeypatch):
    import socratic_exp.models.base as models_base

    monkeypatch.setattr(models_base, "frozen_copy", lambda *_: pytest.fail("frozen_copy called"))
    trainer, student = _trainer(
        cache_dir, "sdpo", "algorithm.teacher_weights=shared", "algorithm.teacher_regularization=none"
    )
    assert student.model is trainer.model  # the run's student is the PEFT model from here on
    teacher = trainer.teacher_model
    assert teacher.peft_model is trainer.model and teacher.adapter == "default"
    trainable = [p for p in trainer.model.parameters() if p.requires_grad]
    assert [id(p) for p in teacher.parameters()] == [id(p) for p in trainable]
    assert trainer.memory["copy_mb"] == 0.0

    trainer, _ = _trainer(cache_dir, "sdpo", "algorithm.teacher_weights=copy", "algorithm.teacher_update_rate=0.1")
    teacher = trainer.teacher_model
    assert teacher.adapter == "teacher" and set(trainer.model.peft_config) == {"default", "teacher"}
    assert sum(p.numel() for p in teacher.parameters()) == R4_ALL_LINEAR
    assert trainer.memory["copy_mb"] == pytest.approx(R4_ALL_LINEAR * 4 / 2**20)
    assert _trainable(trainer.model) == R4_ALL_LINEAR  # the teacher adapter is frozen
    _perturb_adapters(trainer.model)
    assert not torch.allclose(_logps(teacher, IDS, 7), _logps(trainer.model, IDS, 7), atol=1e-3)
    # a checkpoint's two adapters come back into their own adapters, and the teacher stays frozen
    with torch.no_grad():
        for p in teacher.parameters():
            p.fill_(0.5)
    folder = Path(tempfile.mkdtemp())
    trainer.model.save_pretrained(folder)
    with torch.no_grad():
        for name, p in trainer.model.named_parameters():
            if "lora_" in name:
                p.zero_()
    trainer._load_from_checkpoint(str(folder))
    assert all(float(p.min()) == float(p.max()) == 0.5 for p in teacher.parameters())
    student = [p for n, p in trainer.model.named_parameters() if ".default." in n]
    assert all(torch.allclose(p, torch.full_like(p, 0.05)) for p in student)
    assert _trainable(trainer.model) == R4_ALL_LINEAR


@pytest.mark.slow
def test_socraticpo_reference_policy_is_the_base_model(cache_dir, monkeypatch):
    import socratic_exp.models.base as models_base

    monkeypatch.setattr(models_base, "frozen_copy", lambda *_: pytest.fail("frozen_copy called"))
    trainer, _ = _trainer(cache_dir, "socraticpo", "teacher=llm")
    assert trainer.ref_policy.adapter is None and trainer.ref_policy.peft_model is trainer.model
    # self-guidance: the teacher generates with the student's weights, adapters included
    assert trainer.components.teacher._teacher.model is trainer.model.get_base_model()


@pytest.mark.slow
def test_vpd_e_step_trains_only_the_adapter_against_the_base_model(cache_dir, monkeypatch):
    """The fixed prior is the base model with adapters off (no copy), and an E-step on a batch with both outcomes moves
    the student's adapter (the shared teacher's) and no base weight."""
    import socratic_exp.models.base as models_base

    monkeypatch.setattr(models_base, "frozen_copy", lambda *_: pytest.fail("frozen_copy called"))
    trainer, _ = _trainer(cache_dir, "vpd", "algorithm.reference_prior=fixed", "algorithm.feedback=environment")
    assert trainer.reference_model.adapter is None and trainer.reference_model.peft_model is trainer.model
    assert [id(p) for p in trainer.teacher_parameters] == [id(p) for p in trainer.teacher_model.parameters()]
    assert sum(p.numel() for p in trainer.teacher_parameters) == R4_ALL_LINEAR
    rows = [dict(trainer.train_dataset[i]) for i in range(4) for _ in range(4)]
    trainer.model.train()
    trainer._after_contexts = lambda *args: None
    output = trainer._generate_and_score_completions(rows)
    correct = torch.tensor([float(i % 2 == 0) for i in range(16)])
    batch = dict(output, correct=correct, distill_mask=torch.ones(16))
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    metrics = trainer.e_step(batch)
    assert metrics["skipped"] == 0.0 and metrics["successes"] == 8.0
    moved = {n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n])}
    assert moved and all(".default." in n and "lora_" in n for n in moved)


# --- whole runs -----------------------------------------------------------------------------------------------------
QUICK = ("debug=quick_warmstart", "model.lora.r=4", "logger=none")
DISTILL = ("algorithm=socratic_rl", "algorithm.distill_every=2")  # one distillation, at the last step
ALGORITHMS = {  # overrides -> a metric the method's LoRA path writes
    "grpo": (("algorithm=grpo", "algorithm.beta=0.05"), "kl"),
    "entropy_masked": (("algorithm=entropy_masked",), "entropy_mask/kept_fraction"),
    "socraticpo": (("algorithm=socraticpo", "teacher=llm"), "socraticpo/reward_kl"),
    # the environment's verdict gives every failed rollout a context: the weak quick student may have no sibling
    "sdpo": (
        ("algorithm=sdpo", "algorithm.teacher_weights=copy", "algorithm.feedback=sibling+environment"),
        "self_distillation/teacher_student_kl",
    ),
    "vpd": (("algorithm=vpd", "algorithm.feedback=environment"), "vpd/skipped"),
    "socratic_rl-kl": ((*DISTILL, "distiller=kl"), "distill/kl_after"),
    "socratic_rl-dpo": ((*DISTILL, "distiller=dpo"), "distill/pairs"),
    "socratic_rl-sft": ((*DISTILL, "distiller=sft"), "distill/examples"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_every_algorithm_runs_with_lora(run_in_process, name):
    overrides, metric = ALGORITHMS[name]
    proc, outputs = run_in_process(*QUICK, *overrides, "algorithm.max_steps=2", "eval.every_steps=0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = run_dirs(outputs)
    assert read_summary(run_dir)["steps"] == 2
    records = read_metrics(run_dir)
    assert any(metric in record for record in records), sorted({k for r in records for k in r})
    checkpoint = run_dir / "checkpoints" / "checkpoint-2"
    assert (checkpoint / "adapter_model.safetensors").is_file() and not (checkpoint / "model.safetensors").exists()
    assert (run_dir / "checkpoints" / "final" / "model.safetensors").is_file()  # merged


@pytest.mark.slow
def test_a_lora_run_resumes_from_its_adapter_checkpoint(run_in_process):
    """VPD with a copy teacher: the student's adapter and the teacher adapter, which its E-step trains (so the
    optimizer state to load covers both)."""
    from safetensors.torch import load_file

    copy = ("algorithm.teacher_weights=copy", "algorithm.teacher_regularization=ema")
    proc, outputs = run_in_process(*QUICK, "algorithm=vpd", *copy, "model.lora.merge_on_save=false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = run_dirs(outputs)
    checkpoints = run_dir / "checkpoints"
    # the student's adapter at the top, the teacher's in its own folder (transformers' layout for two adapters)
    assert (checkpoints / "checkpoint-2" / "teacher" / "adapter_model.safetensors").is_file()
    assert json.loads((checkpoints / "final" / "adapter_config.json").read_text())["r"] == 4
    saved = load_file(checkpoints / "checkpoint-2" / "adapter_model.safetensors")
    assert len(saved) == 2 * 7 * 4 and all("lora_" in key for key in saved)  # A and B of 7 projections x 4 layers
    interrupt_after_step_2(run_dir)
    proc, _ = run_in_process(*QUICK, "algorithm=vpd", *copy, "model.lora.merge_on_save=false", "resume=auto")
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = read_summary(run_dir)
    assert resumed["status"] == "completed" and resumed["resumed"] is True and resumed["steps"] == 4
    assert "resuming from" in proc.stderr + proc.stdout
    assert (checkpoints / "checkpoint-4" / "adapter_model.safetensors").is_file()
    state = json.loads((checkpoints / "checkpoint-4" / "trainer_state.json").read_text())
    assert [e["step"] for e in state["log_history"] if "loss" in e] == [1, 2, 3, 4]


def test_the_kl_distiller_teaches_from_a_snapshot_adapter_and_removes_it(tmp_path, monkeypatch):
    import socratic_exp.models.base as models_base
    from socratic_exp.distillers.base import DistillationData
    from socratic_exp.distillers.kl import KLDistiller
    from socratic_exp.models.base import Student

    monkeypatch.setattr(models_base, "frozen_copy", lambda *_: pytest.fail("frozen_copy called"))
    model, _, tokenizer = _peft()
    base = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    student = Student(model=model, tokenizer=tokenizer, path="tiny")
    data = DistillationData(
        prompts=[f"{a}+{a}*2=" for a in range(1, 9)], answers=[str(3 * a) for a in range(1, 9)], viewpoints=["* first"]
    )
    distiller = KLDistiller(items=8, steps=4, batch_size=4, num_generations=2, learning_rate=1e-2, kl_samples=4)
    metrics = distiller.distill(student, None, data, tmp_path, seed=0)
    assert list(model.peft_config) == ["default"]  # the snapshot adapter is gone
    assert metrics["distill/steps"] == 4.0 and metrics["distill/kl_after"] < metrics["distill/kl_before"]
    assert all(torch.equal(p, base[n]) for n, p in model.named_parameters() if "lora_" not in n)
    assert _trainable(model) == R4_ALL_LINEAR
