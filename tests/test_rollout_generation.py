"""The rollouts' own transformers generation (``algorithms/rollout_generation.py``): SocraticPO's later attempts
continue from the KV cache of the earlier ones and give the very tokens that re-reading the context gives, and the
log-probabilities recorded as the tokens are sampled are the policy's, which REINFORCE++'s KL then reads instead of
a no-grad pass. On the tiny student (a plain context: an attempt's end-of-sequence token is dropped before the
teacher's line) and on a random Qwen3 stand-in (a chat context: the teacher's turn is a user turn of the template)."""

from __future__ import annotations

import random

import pytest
from conftest import compose, perturbed_reference

pytestmark = pytest.mark.slow


def build(cache, *overrides):
    from socratic_exp.runtime.assembly import build_components, build_trainer, workbench

    tiny = ["debug=quick_warmstart", f"model.cache_dir={cache}"]
    tiny = [] if any(o.startswith("model=") for o in overrides) else tiny
    cfg = compose("debug=fast", "logger=none", *tiny, *overrides)
    components = build_components(cfg)
    bench = workbench(components)
    trainer = build_trainer(bench, cache / "run")
    trainer.model.train()  # as in the training loop
    rows = [dict(bench.data["train"][i]) for i in range(4) for _ in range(4)]  # rendered as the trainer sees them
    return trainer, rows


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    from socratic_exp.models.random_qwen3 import build as build_qwen3

    folder = tmp_path_factory.mktemp("qwen3-standin")
    build_qwen3(folder, "standin")
    return folder


STUDENTS = {
    "tiny": [],
    "qwen3-standin": ["model=qwen3_0_6b", "model.enable_thinking=null", "algorithm.max_completion_length=24"],
}


@pytest.fixture(scope="module", params=list(STUDENTS))
def socraticpo(request, tmp_path_factory, standin):
    overrides = [*STUDENTS[request.param], "algorithm=socraticpo", "teacher=rule"]
    if request.param != "tiny":
        overrides.append(f"model.name={standin}")
    return build(tmp_path_factory.mktemp("socraticpo"), *overrides)


def rollout(trainer, rows, *, reuse_cache: bool, seed: int):
    import torch

    trainer._continues = reuse_cache
    torch.manual_seed(seed)
    random.seed(seed)
    return trainer._generate_and_score_completions(rows)


def test_cached_attempts_are_the_tokens_of_rereading_the_context(socraticpo):
    import torch

    trainer, rows = socraticpo
    assert trainer._continues  # the default: transformers generation continues from the cache
    for seed in (0, 1):
        cached = rollout(trainer, rows, reuse_cache=True, seed=seed)
        cached_rollouts = trainer._rollouts
        reread = rollout(trainer, rows, reuse_cache=False, seed=seed)
        attempts = [len(r.outcomes) for r in cached_rollouts]
        assert max(attempts) == trainer.socratic.max_attempts  # later attempts were generated, from the cache
        assert [r.segments for r in cached_rollouts] == [r.segments for r in trainer._rollouts]
        assert torch.equal(cached["completion_ids"], reread["completion_ids"])
        assert torch.equal(cached["tool_mask"], reread["tool_mask"])
        assert torch.equal(cached["completion_mask"], reread["completion_mask"])
        assert "sampling_per_token_logps" in cached and "sampling_per_token_logps" not in reread


def test_recorded_log_probs_are_the_policys_and_feed_the_kl(socraticpo):
    """The log-probabilities recorded at sampling are the loss pass's (float32, to rounding); the teacher's tokens
    get 0; the KL to the initial policy read from them is the KL of the no-grad pass."""
    import torch

    from socratic_exp.algorithms.trl_batch import loss_mask, sequence_inputs

    trainer, rows = socraticpo
    assert trainer.sampled_logps_exact
    output = rollout(trainer, rows, reuse_cache=True, seed=2)
    input_ids, attention = sequence_inputs(output)
    with torch.no_grad():
        policy, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, input_ids, attention, output["completion_ids"].size(1)
        )
    mask = loss_mask(output).bool()
    recorded = output["sampling_per_token_logps"]
    assert mask.sum() > 50
    assert float((recorded - policy)[mask].abs().max()) < 2e-5
    teacher = (output["tool_mask"] == 0) & (output["completion_mask"] == 1)
    assert teacher.any() and float(recorded[teacher].abs().max()) == 0.0
    # against a reference that differs from the policy, the KL from the recorded log-probabilities is the no-grad
    # pass's
    with perturbed_reference(trainer):
        from_recorded = trainer._per_token_kl(output)
        trainer.sampled_logps_exact = False
        try:
            from_pass = trainer._per_token_kl(output)
        finally:
            trainer.sampled_logps_exact = True
    assert float(from_pass.abs().max()) > 1e-3
    assert float((from_recorded - from_pass).abs().max()) < 2e-5


@pytest.fixture(scope="module")
def reinforce_pp(tmp_path_factory):
    return build(tmp_path_factory.mktemp("rpp"), "algorithm=reinforce_pp")


def test_reinforce_pp_records_the_log_probs_its_kl_reads(reinforce_pp):
    import torch

    from socratic_exp.algorithms.trl_batch import loss_mask, sequence_inputs

    trainer, rows = reinforce_pp
    assert trainer.ref_policy is not None and trainer.sampled_logps_exact
    torch.manual_seed(3)
    output = trainer._generate_and_score_completions(rows)
    input_ids, attention = sequence_inputs(output)
    with torch.no_grad():
        policy, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, input_ids, attention, output["completion_ids"].size(1)
        )
    mask = loss_mask(output).bool()
    assert mask.sum() > 50
    assert float((output["sampling_per_token_logps"] - policy)[mask].abs().max()) < 2e-5


@pytest.mark.parametrize(
    ("setting", "value"),
    [("top_p", 0.9), ("top_k", 20), ("min_p", 0.05), ("repetition_penalty", 1.1)],
)
def test_truncated_or_penalised_sampling_is_not_the_policys(reinforce_pp, setting, value):
    from socratic_exp.algorithms.rollout_generation import records_policy_logps

    trainer, _ = reinforce_pp
    assert records_policy_logps(trainer)
    original = trainer.generation_kwargs[setting]
    trainer.generation_kwargs[setting] = value
    try:
        assert not records_policy_logps(trainer)
    finally:
        trainer.generation_kwargs[setting] = original


# --- decoding in bfloat16 (model.decode_dtype) ----------------------------------------------------------------------
@pytest.fixture
def any_cpu_decodes_bf16(monkeypatch):
    """The casting is under test, not its speed: model.decode_dtype is accepted on a CPU without native bf16 too
    (where it is refused as slower than float32)."""
    monkeypatch.setattr("socratic_exp.core.run_folder.native_bf16", lambda *args: True)


def test_bfloat16_decoding_casts_for_generate_only_and_keeps_the_float32_weights(standin, any_cpu_decodes_bf16):
    import copy

    import torch

    from socratic_exp.models.generation import generate
    from socratic_exp.runtime.assembly import build_components

    overrides = ["model=qwen3_0_6b", f"model.name={standin}", "model.enable_thinking=null"]
    components = build_components(compose(*overrides, "model.decode_dtype=bfloat16"))
    student = components.model.load(components.task)
    model = student.model
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    seen = []
    hook = model.lm_head.register_forward_hook(lambda module, args, out: seen.append(module.weight.dtype))
    texts = generate(student, ["Q: 1+2=?", "Q: 3*4=?"], max_new_tokens=4, batch_size=2)
    assert len(texts) == 2 and seen and set(seen) == {torch.bfloat16}
    seen.clear()
    model(torch.tensor([[5, 6, 7]]))  # training's forward: float32
    assert seen == [torch.float32]
    assert all(p.dtype == torch.float32 and torch.equal(p, before[name]) for name, p in model.named_parameters())
    assert student.info["decode_dtype"] == "bfloat16" and student.info["dtype"] == "float32"
    # a copy (TRL's reference model, the frozen initial policy) decodes its own weights in bfloat16
    twin = copy.deepcopy(model)
    hook.remove()
    twin_seen = []
    twin.lm_head.register_forward_hook(lambda module, args, out: twin_seen.append(module.weight.dtype))
    twin.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=2, do_sample=False)
    assert set(twin_seen) == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_bfloat16_decoding_is_refused_on_a_cpu_without_native_bfloat16(monkeypatch, standin):
    from socratic_exp.core.errors import ConfigError
    from socratic_exp.models import hub
    from socratic_exp.runtime.assembly import build_components

    monkeypatch.setattr("socratic_exp.core.run_folder.native_bf16", lambda fields=None: False)
    monkeypatch.setattr(hub, "_has_gpu", lambda: False)
    with pytest.raises(ConfigError, match=r"model.decode_dtype.*native bfloat16.*remove model.decode_dtype"):
        build_components(compose("model=qwen3_0_6b", f"model.name={standin}", "model.decode_dtype=bfloat16"))


@pytest.mark.parametrize(("native", "expected"), [(True, "bfloat16"), (False, None)])
def test_auto_decodes_in_bfloat16_only_on_a_cpu_that_computes_it(monkeypatch, standin, native, expected):
    from socratic_exp.models import hub
    from socratic_exp.runtime.assembly import build_components

    monkeypatch.setattr("socratic_exp.core.run_folder.native_bf16", lambda fields=None: native)
    monkeypatch.setattr(hub, "_has_gpu", lambda: False)
    components = build_components(compose("model=qwen3_0_6b", f"model.name={standin}", "model.decode_dtype=auto"))
    assert components.model.decoding_dtype() == expected  # accepted either way: auto never refuses


def test_the_kl_does_not_read_log_probs_decoded_in_bfloat16(tmp_path_factory, standin, any_cpu_decodes_bf16):
    trainer, _ = build(
        tmp_path_factory.mktemp("bf16"), "algorithm=reinforce_pp", "model=qwen3_0_6b", f"model.name={standin}",
        "model.enable_thinking=null", "model.decode_dtype=bfloat16",
    )  # fmt: skip
    assert trainer.ref_policy is not None and not trainer.sampled_logps_exact
