"""VPD's claims, as the study scores them (``socratic_exp.study.evidence``); its premise, a teacher that reads
feedback, is SDPO's (``algorithms/sdpo/evidence.py``)."""

from __future__ import annotations

from socratic_exp.study.evidence import Claim

ORDER = 3
CLAIMS = (
    Claim("vpd>grpo", "VPD", "variational policy distillation beats GRPO", "vpd_dynamic", "grpo"),
    Claim("vpd_dynamic>fixed", "VPD, Fig. 5", "the prior anchored to the current student beats the initial one",
          "vpd_dynamic", "vpd_fixed"),
)  # fmt: skip
