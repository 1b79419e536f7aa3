#!/usr/bin/env bash
# GPU smoke test: every GPU-only code path once, debug-sized, then GRPO and SocraticPO at Qwen3-0.6B's size, in under
# 10 minutes on one H100 / H200 (GPU_SMOKE_BUDGET caps it at 560 s), with no network.
#
# On a borrowed GPU machine (the device tool's `run`, from the repository root, with the wheels carried). A command
# may run 10 minutes and bring back 8 files, so the smoke takes two calls back to back on the warm machine, each
# packing its log folder into one archive under $OUT:
#   bash benchmarks/gpu_smoke_wheels.sh                  # here, first: .whl/ (git-ignored, ~8 MiB)
#   run(command="GPU_SMOKE_STEPS=grpo,socraticpo,entropy_masked,vpd,qwen3_lora,zero2,zero3 \
#       GPU_SMOKE_ARCHIVE=$OUT/smoke.tar.gz bash benchmarks/gpu_smoke.sh /tmp/gpu_smoke", carry=[".whl"], timeout_s=600)
#   run(command="GPU_SMOKE_STEPS=qwen3_real GPU_SMOKE_ARCHIVE=$OUT/real.tar.gz bash benchmarks/gpu_smoke.sh \
#       /tmp/gpu_smoke", carry=[".whl"], timeout_s=600)
# Measured on an H100 80GB (research/results/gpu_smoke/h100/): the seven debug-sized steps 35-65 s each, 342 s
# together with the install; qwen3_real 361 s (the 0.6B model built in ~25 s, GRPO's 3 steps with evaluations and
# checkpoint in 90 s, SocraticPO's in 228 s), 375 s with the install. All steps in one call run out of the 560 s
# budget and cut qwen3_real short; the two calls above fit.
# On a CPU machine, the same steps without bf16 (ZeRO-2/3 SKIPped unless deepspeed is installed):
#   GPU_SMOKE_DEVICE=cpu GPU_SMOKE_WHEELS=none bash benchmarks/gpu_smoke.sh /tmp/gpu_smoke
#
# Steps, each a separate process with its own log file, timeout and PASS / FAIL (reason) / SKIP row:
#   grpo            algorithm=grpo, bf16 on CUDA
#   socraticpo      algorithm=socraticpo teacher=rule
#   entropy_masked  algorithm=entropy_masked
#   vpd             algorithm=vpd
#   qwen3_lora      a randomly initialised 2-layer Qwen3 built here (with a chat template) through model=qwen3_0_6b
#                   model.name=<its folder>, with LoRA (model.lora.r=8)
#   zero2, zero3    accelerate launch --config_file launch/accelerate/zero{2,3}.yaml --num_processes 1 (bf16 on CUDA;
#                   on CPU: fp32 with DeepSpeed's CPU accelerator where deepspeed is installed, else SKIP)
#   qwen3_real      benchmarks/gpu_real_size.py: a random Qwen3 with Qwen3-0.6B's dimensions (on CPU: the 2-layer
#                   stand-in), 3 steps each of GRPO and SocraticPO teacher=rule at a realistic batch, bf16 on CUDA:
#                   generated tokens/s, step seconds, peak GPU memory beside the memory planner's figure; its table
#                   and JSON in LOG_FOLDER/qwen3_real/ (gpu_real_size.md, gpu_real_size.json). Started only with
#                   GPU_SMOKE_REAL_MIN seconds of the budget left (else SKIP), so that it is not cut short
# A step passes when its exit code is 0 AND its run folder's summary.json says "status": "completed" (qwen3_real:
# LOG_FOLDER/qwen3_real/gpu_real_size.json, both runs completed).
# The last lines printed are the table (step | result | seconds | log file | reason); exit code 1 if any step failed.
#
# Environment (all optional):
#   GPU_SMOKE_DEVICE   auto (default: cuda if torch sees a GPU) | cuda | cpu
#   GPU_SMOKE_WHEELS   folder of the wheels to install first (default: .whl/ where it holds wheels, else none);
#                      none: use the interpreter's packages as they are
#   GPU_SMOKE_SITE     where the wheels are installed (default: /tmp/gpu_smoke_site, emptied first)
#   GPU_SMOKE_RUNS     where the run folders go, kept (default: a fresh /tmp/gpu_smoke_runs.XXXX, removed at the end;
#                      checkpoints are ~25 MB a step, too much to bring back: LOG_FOLDER/runs/<step>/ gets the small files)
#   GPU_SMOKE_STEPS    comma-separated subset of the steps above (default: all)
#   GPU_SMOKE_STEP_TIMEOUT  seconds per debug-sized step (default: 120 on cuda, 600 on cpu)
#   GPU_SMOKE_REAL_TIMEOUT  seconds for qwen3_real (default: 500 on cuda, 600 on cpu)
#   GPU_SMOKE_REAL_MIN seconds of the budget qwen3_real needs to start (default: 400 on cuda, 20 on cpu)
#   GPU_SMOKE_BUDGET   seconds for the whole script, install included; a step that would start with under 20 s left
#                      is SKIPped (default: 560 on cuda, under the device tool's 600 s a command; 0 on cpu: no limit)
#   GPU_SMOKE_ARCHIVE  a .tar.gz to pack the log folder into at the end (default: none), so that a machine that
#                      returns few files returns one
#   PYTHON             the interpreter (default: python3)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
all_steps=(grpo socraticpo entropy_masked vpd qwen3_lora zero2 zero3 qwen3_real)

usage() {
    cat <<EOF
usage: bash benchmarks/gpu_smoke.sh LOG_FOLDER
Runs GRPO (bf16), SocraticPO, the entropy mask, VPD, a random Qwen3 with LoRA, and accelerate launch with the ZeRO-2
and ZeRO-3 profiles on one process, each debug-sized (debug=fast logger=none), then GRPO and SocraticPO on a random
Qwen3 of 0.6B parameters (benchmarks/gpu_real_size.py), and prints a pass/fail table last.
Logs: LOG_FOLDER/smoke.log (environment, progress, the table), LOG_FOLDER/NN_<step>.log (each step's output),
LOG_FOLDER/runs/<step>/ (each run folder's summary.json, metrics and log, without checkpoints) and
LOG_FOLDER/qwen3_real/ (the real-size table and JSON: tokens/s, step seconds, peak GPU memory, the planner's figure).
Steps: ${all_steps[*]}
Environment: GPU_SMOKE_DEVICE=auto|cuda|cpu, GPU_SMOKE_WHEELS=<folder>|none, GPU_SMOKE_STEPS=<a,b>,
GPU_SMOKE_STEP_TIMEOUT=<s>, GPU_SMOKE_REAL_TIMEOUT=<s>, GPU_SMOKE_REAL_MIN=<s>, GPU_SMOKE_BUDGET=<s>, GPU_SMOKE_SITE,
GPU_SMOKE_RUNS, GPU_SMOKE_ARCHIVE=<file.tar.gz>, PYTHON (the script's header says more)
EOF
}

# ---------------------------------------------------------------------------------------------------------------
# One step, run as `gpu_smoke.sh __step NAME RUN_DIR LOG_DIR` in a process of its own, so that `timeout` ends it and
# every process it started (timeout signals its whole process group) and one step can do several things (qwen3_lora).
# ---------------------------------------------------------------------------------------------------------------
build_qwen3() {
    # A 2-layer Qwen3 with random weights and the repository's character tokenizer, plus a ChatML template (Qwen3's
    # own format, without tools or thinking): a Qwen3-architecture student that needs no download.
    "$PY" - "$1" <<'PY'
import sys

import torch
from transformers import AutoModelForCausalLM, Qwen3Config

from socratic_exp.models.char_tokenizer import build_char_tokenizer

folder = sys.argv[1]
torch.manual_seed(0)
tokenizer = build_char_tokenizer()
tokenizer.chat_template = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
config = Qwen3Config(
    vocab_size=len(tokenizer),
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=2048,  # rope: the chat prompts' characters plus the completion, with room to spare
    tie_word_embeddings=True,
    pad_token_id=tokenizer.pad_token_id,
    eos_token_id=tokenizer.eos_token_id,
    bos_token_id=None,
)
model = AutoModelForCausalLM.from_config(config)
model.save_pretrained(folder)
tokenizer.save_pretrained(folder)
print(f"random Qwen3 ({model.num_parameters()} parameters, vocabulary {len(tokenizer)}) saved to {folder}")
PY
}

run_one_step() {
    local name=$1 run_dir=$2 log_dir=$3
    local common=(debug=fast logger=none)
    # bf16 where the config has the switch (GRPOConfig.bf16, which every algorithm here inherits); CPU: its default
    # (off), since bf16 on a CPU without native support is emulated and slow
    if [[ $DEVICE == cuda ]]; then common+=(algorithm.bf16=true); fi
    export SOCRATIC_EXP_RUN_DIR=$run_dir  # pins the run folder, for every rank of a launch too
    cd "$repo"
    set -x
    case $name in
        grpo) exec "$PY" -m socratic_exp algorithm=grpo "${common[@]}" ;;
        socraticpo) exec "$PY" -m socratic_exp algorithm=socraticpo teacher=rule "${common[@]}" ;;
        entropy_masked) exec "$PY" -m socratic_exp algorithm=entropy_masked "${common[@]}" ;;
        vpd) exec "$PY" -m socratic_exp algorithm=vpd "${common[@]}" ;;
        qwen3_lora)
            local model_dir=$run_dir.model
            build_qwen3 "$model_dir"
            # the qwen3_0_6b option (HubModel: chat template, enable_thinking=false) on a local folder instead of the
            # Hub model; model.lora.r > 0: peft adapters on every linear layer
            exec "$PY" -m socratic_exp algorithm=grpo model=qwen3_0_6b model.name="$model_dir" model.lora.r=8 \
                "${common[@]}" ;;
        zero2 | zero3)
            # accelerate's CLI as a module: the interpreter's own accelerate, whatever PATH holds. The profiles say
            # mixed_precision: bf16, which must match TRL's bf16 (transformers refuses a mismatched DeepSpeed config):
            # on CPU both are off
            local precision=()
            if [[ $DEVICE == cpu ]]; then precision=(--mixed_precision no); fi
            exec "$PY" -m accelerate.commands.launch --config_file "launch/accelerate/$name.yaml" \
                --num_processes 1 --num_machines 1 "${precision[@]}" -m socratic_exp algorithm=grpo "${common[@]}" ;;
        qwen3_real)
            # its own overrides (bf16 on CUDA, fp32 on CPU, the real-size batch) and its run folders under RUN_DIR; the
            # table and JSON in LOG_DIR/qwen3_real. CPU: the 2-layer stand-in, the same pipeline in about a minute
            local size=0.6b
            if [[ $DEVICE == cpu ]]; then size=standin; fi
            exec "$PY" benchmarks/gpu_real_size.py --device "$DEVICE" --size "$size" --work "$run_dir" \
                "$log_dir/qwen3_real" ;;
        *) echo "unknown step: $name" >&2; exit 2 ;;
    esac
}

if [[ ${1:-} == __step ]]; then
    run_one_step "$2" "$3" "$4"
fi

# ---------------------------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------------------------
case ${1:-} in
    -h | --help) usage; exit 0 ;;
    "") usage >&2; echo "error: the log folder argument is missing" >&2; exit 2 ;;
esac
if [[ $# -gt 1 ]]; then usage >&2; echo "error: one argument only, the log folder" >&2; exit 2; fi

logdir=$1
mkdir -p "$logdir"
logdir=$(cd "$logdir" && pwd)
main_log=$logdir/smoke.log
: >"$main_log"
say() { echo "$*" | tee -a "$main_log"; }

started=$SECONDS
PY=${PYTHON:-python3}
export PY
command -v "$PY" >/dev/null || { say "error: no interpreter $PY"; exit 2; }

# No network on the target: every hub client must fail fast on a cache miss instead of waiting on timeouts
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

# --- the wheels: installed into a folder of their own, first on PYTHONPATH (--no-deps: the target's packages stay) ---
wheels=${GPU_SMOKE_WHEELS:-}
if [[ -z $wheels ]]; then
    if compgen -G "$repo/.whl/*.whl" >/dev/null; then wheels=$repo/.whl; else wheels=none; fi
fi
site=${GPU_SMOKE_SITE:-/tmp/gpu_smoke_site}
if [[ $wheels != none ]]; then
    compgen -G "$wheels/*.whl" >/dev/null || { say "error: no wheels in $wheels (bash benchmarks/gpu_smoke_wheels.sh)"; exit 2; }
    rm -rf "$site" && mkdir -p "$site"
    wheel_files=("$wheels"/*.whl)
    if "$PY" -m pip --version >/dev/null 2>&1; then
        install_note="wheels: ${#wheel_files[@]} from $wheels installed into $site (pip output: $logdir/install.log)"
        "$PY" -m pip install --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
            --target "$site" "${wheel_files[@]}" >"$logdir/install.log" 2>&1 ||
            { say "error: pip install failed (see $logdir/install.log)"; exit 2; }
    else
        # an interpreter without pip (e.g. a uv venv): a wheel is a zip of site-packages' layout, so unpacking it
        # into a folder on sys.path installs it (entry-point scripts aside, which nothing here uses)
        install_note="wheels: no pip for $PY; ${#wheel_files[@]} from $wheels unpacked into $site"
        for wheel in "${wheel_files[@]}"; do "$PY" -m zipfile -e "$wheel" "$site"; done
    fi
    export PYTHONPATH=$site:$repo${PYTHONPATH:+:$PYTHONPATH}
else
    install_note="wheels: none installed (GPU_SMOKE_WHEELS=none or no .whl/): the interpreter's packages as they are"
    # the repository root: the socratic_exp package, and hydra_plugins/ (Hydra finds launcher plugins there)
    export PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH}
fi

# --- the environment, at the top of the log ---
{
    echo "== environment ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(hostname))"
    echo "repository: $repo ($(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout'))"
    if command -v nvidia-smi >/dev/null; then nvidia-smi -L 2>&1 || true; else echo "nvidia-smi: absent"; fi
    echo "$install_note"
    echo "PYTHONPATH=$PYTHONPATH"
} | tee -a "$main_log"
{ "$PY" - <<'PY' 2>&1 || true; } | tee -a "$main_log"
import importlib.metadata as md
import platform
import sys

print(f"python {platform.python_version()} ({sys.executable})")
for name in ["torch", "transformers", "trl", "accelerate", "peft", "datasets", "deepspeed", "hydra-core", "omegaconf",
             "antlr4-python3-runtime", "math-verify", "huggingface_hub", "tokenizers", "safetensors", "numpy", "pyarrow",
             "fsspec", "pydantic"]:
    try:
        version = md.version(name)
    except md.PackageNotFoundError:
        version = "absent"
    print(f"  {name:24} {version}")
import torch

cuda = torch.cuda.is_available()
print(f"torch CUDA {torch.version.cuda}, available: {cuda}", end="")
print(f", {torch.cuda.get_device_name(0)}, bf16: {torch.cuda.is_bf16_supported()}" if cuda else "")
PY
# (a broken environment still goes on to the steps: their rows say what fails)

device=${GPU_SMOKE_DEVICE:-auto}
if [[ $device == auto ]]; then
    device=$("$PY" -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")' 2>/dev/null || echo cpu)
fi
case $device in cuda | cpu) ;; *) say "error: GPU_SMOKE_DEVICE=$device: expected auto, cuda or cpu"; exit 2 ;; esac
export DEVICE=$device
if [[ $device == cuda ]]; then
    step_timeout=${GPU_SMOKE_STEP_TIMEOUT:-120}
    # qwen3_real: ~6-7 minutes on an H100 (the header's figures); 500 s leaves room inside the budget when it runs
    # alone, and it starts only with 400 s left, so that the budget does not cut it short (a SKIP says so instead)
    real_timeout=${GPU_SMOKE_REAL_TIMEOUT:-500}
    real_min=${GPU_SMOKE_REAL_MIN:-400}
    budget=${GPU_SMOKE_BUDGET:-560}
    export DS_ACCELERATOR=cuda  # DeepSpeed's wheel was built without a GPU: name the accelerator rather than guess
else
    step_timeout=${GPU_SMOKE_STEP_TIMEOUT:-600}
    real_timeout=${GPU_SMOKE_REAL_TIMEOUT:-600}
    real_min=${GPU_SMOKE_REAL_MIN:-20}
    budget=${GPU_SMOKE_BUDGET:-0}
    export CUDA_VISIBLE_DEVICES=""  # GPU_SMOKE_DEVICE=cpu on a GPU machine: keep torch off the GPU
    # DeepSpeed's CPU accelerator (gloo) runs ZeRO-2/3 in fp32 too; its first launch JIT-builds a shared-memory
    # communication op with the C++ compiler (a few minutes; cached in ~/.cache/torch_extensions)
    export DS_ACCELERATOR=cpu
fi
has_deepspeed=$("$PY" -c 'import importlib.util as u; print(int(u.find_spec("deepspeed") is not None))' 2>/dev/null || echo 0)
runs=${GPU_SMOKE_RUNS:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_smoke_runs.XXXX")}
mkdir -p "$runs"
IFS=, read -r -a steps <<<"${GPU_SMOKE_STEPS:-$(IFS=,; echo "${all_steps[*]}")}"
say "device: $device | step timeout ${step_timeout}s (qwen3_real ${real_timeout}s) | budget ${budget}s (0: none) |" \
    "run folders: $runs"
say "steps: ${steps[*]}"

# --- the steps ---
names=() results=() seconds=() logs=()
failed=0
record() {  # name result seconds log
    names+=("$1") results+=("$2") seconds+=("$3") logs+=("$4")
    say "$(printf '%-15s %s (%ss)' "$1" "$2" "$3")"
}
error_line() {  # the most telling line of a failed step's log: its last exception, else its last line
    local line
    line=$(grep -E '^[A-Za-z_.]*(Error|Exception)\b|^error:|[Ee]rror: ' "$1" | grep -v '^+ ' | tail -n 1 || true)
    [[ -n $line ]] || line=$(grep -v '^\s*$' "$1" | tail -n 1 || true)
    echo "${line:0:160}"
}
keep_small_files() {  # the run folder's logs, metrics and summary, without its checkpoints
    local from=$1 to=$2
    [[ -d $from ]] || return 0
    mkdir -p "$to"
    (cd "$from" && find . -type f -size -2048k -not -path './checkpoints/*' -print0 | tar --null -cf - -T -) |
        (cd "$to" && tar -xf -)
}

number=0
for name in "${steps[@]}"; do
    number=$((number + 1))
    log=$logdir/$(printf '%02d' "$number")_$name.log
    if [[ " ${all_steps[*]} " != *" $name "* ]]; then
        record "$name" "FAIL (unknown step; steps: ${all_steps[*]})" 0 "-"; failed=1; continue
    fi
    if [[ $device == cpu && ($name == zero2 || $name == zero3) && $has_deepspeed == 0 ]]; then
        # on the GPU a missing DeepSpeed is a failure (the wheels bring it); here it is optional
        record "$name" "SKIP (deepspeed is not installed; device=cpu)" 0 "-"; continue
    fi
    limit=$step_timeout needed=20
    if [[ $name == qwen3_real ]]; then limit=$real_timeout needed=$real_min; fi
    if ((budget > 0)); then
        left=$((budget - (SECONDS - started)))
        if ((left < needed)); then
            record "$name" "SKIP (out of time: ${left}s of the ${budget}s budget left, ${needed}s needed)" 0 "-"
            continue
        fi
        if ((left < limit)); then limit=$left; fi
    fi
    run_dir=$runs/$name
    rm -rf "$run_dir" "$run_dir.model"
    say "-- $name: log $log (timeout ${limit}s)"
    t0=$SECONDS
    # --kill-after: a step that ignores SIGTERM (a hung NCCL call) is killed 20 s later
    if timeout --kill-after=20 "$limit" bash "${BASH_SOURCE[0]}" __step "$name" "$run_dir" "$logdir" >"$log" 2>&1; then
        rc=0
    else
        rc=$?
    fi
    took=$((SECONDS - t0))
    summary=$run_dir/summary.json
    if [[ $name == qwen3_real ]]; then
        # its runs' small files are in LOG_FOLDER/qwen3_real/runs already; its JSON's status covers both runs
        summary=$logdir/qwen3_real/gpu_real_size.json
    else
        keep_small_files "$run_dir" "$logdir/runs/$name"
    fi
    status=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("status"))' \
        "$summary" 2>/dev/null || echo "no $(basename "$summary")")
    if ((rc == 124 || rc == 137)); then
        result="FAIL (timeout after ${limit}s; summary: $status)"
    elif ((rc != 0)); then
        result="FAIL (exit $rc: $(error_line "$log"))"
    elif [[ $status != completed ]]; then
        result="FAIL (exit 0 but summary status: $status)"
    else
        result=PASS
    fi
    [[ $result == PASS ]] || failed=1
    record "$name" "$result" "$took" "$log"
done

# the run folders' small files are in the log folder; their checkpoints go, unless GPU_SMOKE_RUNS chose the folder
if [[ -z ${GPU_SMOKE_RUNS:-} ]]; then rm -rf "$runs"; fi

# --- the table, last ---
{
    echo
    echo "== gpu_smoke on $device: $((SECONDS - started))s in all ($(date -u +%H:%M:%SZ))"
    printf '| %-14s | %-6s | %7s | %-s | %s\n' step result seconds "log file" reason
    echo "|----------------|--------|---------|----------|--------"
    for i in "${!names[@]}"; do
        result=${results[$i]} reason=""
        if [[ $result == *" ("* ]]; then reason=${result#* (} reason=${reason%)} result=${result%% *}; fi
        printf '| %-14s | %-6s | %7s | %s | %s\n' "${names[$i]}" "$result" "${seconds[$i]}" "${logs[$i]}" "$reason"
    done
    echo
    if ((failed)); then echo "RESULT: FAIL"; else echo "RESULT: PASS"; fi
} | tee -a "$main_log"
if [[ -n ${GPU_SMOKE_ARCHIVE:-} ]]; then
    mkdir -p "$(dirname "$GPU_SMOKE_ARCHIVE")"
    tar -czf "$GPU_SMOKE_ARCHIVE" -C "$(dirname "$logdir")" "$(basename "$logdir")"
    echo "log folder packed into $GPU_SMOKE_ARCHIVE"
fi
exit "$failed"
