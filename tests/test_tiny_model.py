"""model=tiny's warm-start: traces packed several to a row see only themselves (PackingCollator)."""

from __future__ import annotations

import torch

from socratic_exp.models.char_tokenizer import build_char_tokenizer
from socratic_exp.models.tiny import TinyModel
from socratic_exp.models.tiny.warmstart import PackingCollator, encode_examples


def test_rows_are_packed_first_fit_decreasing_with_positions_from_zero():
    features = [{"input_ids": [1] * 5, "labels": [-100, 1, 1, 1, 1]}, {"input_ids": [2] * 4, "labels": [2] * 4},
                {"input_ids": [3] * 3, "labels": [3] * 3}]  # fmt: skip
    batch = PackingCollator(pad_token_id=0, max_length=8)(features)
    # 5 + 3 fill the first row; 4 starts the second, padded to 8 as a block of its own without labels
    assert batch["input_ids"].tolist() == [[1, 1, 1, 1, 1, 3, 3, 3], [2, 2, 2, 2, 0, 0, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3, 4, 0, 1, 2], [0, 1, 2, 3, 0, 1, 2, 3]]
    assert batch["labels"].tolist() == [[-100, 1, 1, 1, 1, 3, 3, 3], [2, 2, 2, 2, -100, -100, -100, -100]]
    assert "attention_mask" not in batch  # transformers derives the block-diagonal mask from the positions


def test_examples_encode_context_masked_and_eos_learned_cut_at_max_length():
    tokenizer = build_char_tokenizer()  # ids: <pad> 0, <eos> 1, <unk> 2, then chr(32 + i) -> 3 + i
    examples = [[("Q: 1", False), ("2\n", True)], [("7", True)]]
    assert encode_examples(examples, tokenizer, max_length=8) == [
        {"input_ids": [52, 29, 3, 20, 21, 98, 1], "labels": [-100, -100, -100, -100, 21, 98, 1]},
        {"input_ids": [26, 1], "labels": [26, 1]},
    ]
    assert encode_examples(examples[:1], tokenizer, max_length=3)[0] == {"input_ids": [52, 29, 3], "labels": [-100] * 3}


def test_packed_loss_equals_the_traces_one_by_one():
    from socratic_exp.tasks.arithmetic import ArithmeticTask

    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    model = TinyModel().build_untrained(tokenizer).eval()
    examples = ArithmeticTask(train_size=10, eval_size=10, probe_size=0).warmstart_examples(12, seed=0)
    features = encode_examples(examples, tokenizer, 256)
    batch = PackingCollator(tokenizer.pad_token_id, 256)(features)
    assert batch["input_ids"].shape[0] < len(features)  # packing happened

    def summed_loss(input_ids, labels, **inputs):
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=input_ids, use_cache=False, **inputs).logits, -1)[:, :-1]
        targets = labels[:, 1:]
        picked = logp.gather(-1, targets.clamp_min(0).unsqueeze(-1)).squeeze(-1)
        return float(-picked[targets != -100].sum())

    packed = summed_loss(batch["input_ids"], batch["labels"], position_ids=batch["position_ids"])
    alone = sum(summed_loss(torch.tensor([f["input_ids"]]), torch.tensor([f["labels"]])) for f in features)
    assert abs(packed - alone) < 1e-3 * alone


def test_bf16_autocast_follows_the_setting_or_what_the_machine_computes_natively(monkeypatch, tmp_path):
    from socratic_exp.tasks.arithmetic import ArithmeticTask

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    assert TinyModel().uses_bf16() is False  # emulated bf16 would be slower than float32
    assert TinyModel(warmstart_bf16=True).uses_bf16() is True
    task = ArithmeticTask()
    float32_path = TinyModel(cache_dir=str(tmp_path)).cache_path(task)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    assert TinyModel().uses_bf16() is True
    assert TinyModel(warmstart_bf16=False).uses_bf16() is False
    # a student warm-started in the other precision is another student: it is cached apart
    assert TinyModel(cache_dir=str(tmp_path)).cache_path(task) != float32_path
    assert TinyModel(cache_dir=str(tmp_path), warmstart_bf16=False).cache_path(task) == float32_path


def test_a_build_killed_outright_leaves_no_scratch_folder_behind_the_next_one(tmp_path):
    from socratic_exp.tasks.arithmetic import ArithmeticTask

    task = ArithmeticTask()
    spec = TinyModel(cache_dir=str(tmp_path), hidden_size=16, num_heads=2, intermediate_size=32, num_layers=1,
                     warmstart_examples=64, warmstart_steps=2, warmstart_bf16=False)  # fmt: skip
    path = spec.cache_path(task)
    killed = tmp_path / f".{path.name}-x1y2z3" / "trainer"  # what SIGKILL leaves of a build of this key
    killed.mkdir(parents=True)
    other_key = tmp_path / ".tiny-0123456789abcdef-x1y2z3"  # another key's build, maybe running: not ours to touch
    other_key.mkdir()
    student = spec.load(task)
    assert student.info["settings"]["warmstart_steps"] == 2
    assert not killed.parent.exists() and other_key.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, f"{path.name}.lock", other_key.name])
