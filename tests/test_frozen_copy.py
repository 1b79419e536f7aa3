"""``frozen_copy``: a copy that keeps scoring with its own weights, also after TRL patched the source's forward."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from trl.trainer.utils import add_fused_lm_head

from socratic_exp.models.base import frozen_copy


def test_a_copy_of_a_trl_patched_model_scores_with_its_own_weights_on_both_paths():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2)
    source = LlamaForCausalLM(config)
    add_fused_lm_head(source)  # what TRL's GRPOTrainer does to the student
    copy = frozen_copy(source)
    ids = torch.tensor([[1, 2, 3, 4]])
    plain_before = copy(input_ids=ids).logits.detach().clone()
    fused_before = copy(input_ids=ids, labels=ids, fused_lm_head=True).log_probs.detach().clone()

    with torch.no_grad():  # the source trains on
        for parameter in source.parameters():
            parameter.add_(1.0)

    assert torch.equal(copy(input_ids=ids).logits, plain_before)
    assert torch.equal(copy(input_ids=ids, labels=ids, fused_lm_head=True).log_probs, fused_before)
    assert not torch.allclose(source(input_ids=ids).logits, plain_before)  # the source did move
    assert not any(p.requires_grad for p in copy.parameters())

    copy_of_copy = frozen_copy(copy)  # e.g. a test's perturbed reference: it must score its own weights too
    with torch.no_grad():
        for parameter in copy_of_copy.parameters():
            parameter.add_(1.0)
    assert not torch.allclose(copy_of_copy(input_ids=ids).logits, plain_before)
    fused_after = copy_of_copy(input_ids=ids, labels=ids, fused_lm_head=True).log_probs
    assert not torch.allclose(fused_after, fused_before)
    assert torch.equal(copy(input_ids=ids).logits, plain_before)  # and the first copy is untouched
