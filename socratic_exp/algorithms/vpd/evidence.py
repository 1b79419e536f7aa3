"""VPD's claims, as the study scores them (``socratic_exp.study.evidence``); its premise, a teacher that reads
feedback, is SDPO's (``algorithms/sdpo/evidence.py``)."""

from __future__ import annotations

from socratic_exp.study.evidence import Claim

ORDER = 3
# On mathematical reasoning the paper (Fig. 4, DAPO-Math) reports that SDPO collapses, that VPD delays the collapse,
# and that pure GRPO stays ahead of both: those are its claims for the arithmetic testbed, not "VPD beats GRPO".
CLAIMS = (
    Claim("vpd<grpo", "VPD, Fig. 4 (maths)", "pure GRPO stays ahead of VPD on mathematical reasoning", "vpd_dynamic",
          "grpo", "worse"),
    Claim("vpd>sdpo", "VPD, Fig. 4 (maths)", "VPD delays SDPO's collapse: higher accuracy at the same step",
          "vpd_dynamic", "sdpo",
          differences="the E-step; a shared live teacher (sdpo: a copy moved by EMA 0.05); sampled-token reverse KL "
          "(sdpo: JSD on the top 100); token mean (sdpo: sequence mean); success threshold 1.0 (sdpo: 0.5)"),
    Claim("vpd_dynamic>without_e_step", "VPD, Sec. 3.2", "the E-step (the teacher refined on the outcomes) beats "
          "the M-steps alone", "vpd_dynamic", "vpd_without_e_step"),
    Claim("vpd_dynamic>fixed", "VPD, Fig. 5", "the prior anchored to the current student beats the initial one",
          "vpd_dynamic", "vpd_fixed"),
)  # fmt: skip
