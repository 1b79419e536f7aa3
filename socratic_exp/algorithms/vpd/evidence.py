"""VPD's claims, as the study scores them (``socratic_exp.study.evidence``); its premise, a teacher that reads
feedback, is SDPO's (``algorithms/sdpo/evidence.py``)."""

from __future__ import annotations

from socratic_exp.core.methods import Claim, CollapseClaim

# On mathematical reasoning the paper (Fig. 4, DAPO-Math) reports that SDPO collapses, that VPD delays the collapse,
# and that pure GRPO stays ahead of both: those are its claims for the arithmetic testbed, not "VPD beats GRPO".
# VPD's E-step and its settings (against SDPO, which has none)
E_STEP = ("algorithm._target_", "algorithm.e_step", "algorithm.e_step_beta", "algorithm.e_step_every",
          "algorithm.e_step_iterations", "algorithm.reference_prior")  # fmt: skip
CLAIMS = (
    Claim("vpd<grpo", "VPD, Fig. 4 (maths)", "pure GRPO stays ahead of VPD on mathematical reasoning", "vpd_dynamic",
          "grpo", "worse", changes=("algorithm.",)),
    Claim("vpd>sdpo", "VPD, Fig. 4 (maths)", "VPD delays SDPO's collapse: higher accuracy at the same step",
          "vpd_dynamic", "sdpo", changes=E_STEP,
          differences="VPD's live shared teacher without regularisation (teacher_weights, teacher_regularization; "
          "sdpo: a copy moved by EMA 0.05); JSD on the top 100 logits with a tail (distillation, alpha, topk, "
          "add_tail; sdpo: sampled-token reverse KL); loss_aggregation token mean (sdpo: sequence mean); "
          "success_threshold 0.5 (sdpo: 1.0, the same on 0/1 rewards); feedback_on_success (successful rollouts "
          "distilled under their verdict; sdpo: failed ones only); feedback_only_without_solution; no effect here: "
          "remove_thinking (no <think> tags), scale_rewards (no hybrid)"),
    Claim("vpd_dynamic>without_e_step", "VPD, Sec. 3.2", "the E-step (the teacher refined on the outcomes) beats "
          "the M-steps alone", "vpd_dynamic", "vpd_without_e_step", changes=("algorithm.e_step",)),
    Claim("vpd_dynamic>fixed", "VPD, Fig. 5", "the prior anchored to the current student beats the initial one",
          "vpd_dynamic", "vpd_fixed", changes=("algorithm.reference_prior",)),
    # the same two claims of Fig. 4 with the teacher regularised (the trust region of the official SDPO code): the
    # paper's single network read so that its teacher does not collapse, beside our default reading above
    Claim("vpd_trust_region<grpo", "VPD, Fig. 4 (maths)", "pure GRPO stays ahead of VPD (teacher in a trust region)",
          "vpd_trust_region", "grpo", "worse", changes=("algorithm.",)),
    Claim("vpd_trust_region>sdpo", "VPD, Fig. 4 (maths)", "VPD (teacher in a trust region) delays SDPO's collapse",
          "vpd_trust_region", "sdpo", changes=E_STEP,
          differences="both regularise the teacher, VPD by the trust region on its shared weights "
          "(teacher_regularization, teacher_weights; sdpo: a copy moved by EMA 0.05); JSD on the top 100 logits with "
          "a tail (distillation, alpha, topk, add_tail; sdpo: sampled-token reverse KL); loss_aggregation token mean "
          "(sdpo: sequence mean); success_threshold 0.5 (sdpo: 1.0, the same on 0/1 rewards); feedback_on_success "
          "(successful rollouts distilled under their verdict; sdpo: failed ones only); "
          "feedback_only_without_solution; no effect here: remove_thinking (no <think> tags), scale_rewards (no "
          "hybrid)"),
)  # fmt: skip
COLLAPSE_CLAIMS = (
    CollapseClaim("vpd_dynamic>sdpo (collapse)", "VPD, Fig. 4 (maths)", "VPD delays SDPO's collapse", "vpd_dynamic",
                  "sdpo"),
    CollapseClaim("vpd_trust_region>sdpo (collapse)", "VPD, Fig. 4 (maths)", "VPD (teacher in a trust region) "
                  "delays SDPO's collapse", "vpd_trust_region", "sdpo"),
)  # fmt: skip
