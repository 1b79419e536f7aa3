#!/usr/bin/env bash
# Prepares the wheels that benchmarks/gpu_smoke.sh installs on a borrowed GPU machine, which has no network at all.
#
#   bash benchmarks/gpu_smoke_wheels.sh            # into .whl/ at the repository root (git-ignored by .gitignore)
#   bash benchmarks/gpu_smoke_wheels.sh DIR        # into DIR instead
#
# The target: x86-64, CPython 3.12, with torch, transformers, accelerate, peft, huggingface_hub, tokenizers,
# safetensors, numpy, pandas, pyarrow, xxhash, fsspec, requests, rich, tqdm, pyyaml, sympy, jinja2, psutil ... already
# there. Only what the project needs beyond that is fetched: TRL, datasets, Hydra, math-verify and DeepSpeed (the
# zero2 / zero3 profiles) with their own dependencies that the target lacks. wandb and openai are left out: the
# project imports them only for logger=wandb and the black-box teacher, which the smoke test never selects; vLLM is
# left out too (its wheel alone is ~320 MB, and the working tree that travels is limited to 64 MiB).
#
# Every wheel is --no-deps and pinned (the versions of pyproject.toml where it pins one), so the folder holds exactly
# one version of each package and nothing else. Two packages publish no wheel at all and are built here as pure-Python
# py3-none-any wheels: antlr4-python3-runtime 4.9.3 (Hydra and OmegaConf need 4.9.*; math-verify's latex2sympy2_extended
# accepts 4.9.3 to 4.13.2, so one antlr serves both) and DeepSpeed (DS_BUILD_OPS=0: no compiled ops, which DeepSpeed
# JIT-builds only if a run asks for one; ZeRO-2/3 with the Trainer's torch AdamW asks for none).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:-$repo/.whl}
py=${PYTHON:-python3}       # the interpreter whose pip downloads and builds (any 3.x: the tags below pick cp312)
max_mb=35                   # the working tree is ~25 MB and at most 64 MiB travels with the carried paths

# The binary wheels must match the target, not this machine: CPython 3.12, manylinux x86-64 (pure wheels match too).
target_tags=(--python-version 3.12 --implementation cp
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64)

downloads=(
    # the project's own pins (pyproject.toml)
    trl==1.16.0
    datasets==5.2.0
    hydra-core==1.3.8
    omegaconf==2.3.1            # pyproject: >=2.3,<2.4
    math-verify==0.9.0          # only task=math500 / aime / ... import it; small, so the tree is complete
    latex2sympy2_extended==1.11.0  # math-verify 0.9.0 pins it
    # datasets' dependencies missing on the target (datasets 5.2.0: dill<0.4.2, multiprocess<0.70.20)
    dill==0.4.1
    multiprocess==0.70.19       # a py312-none-any wheel: the --python-version above picks the right one
    # DeepSpeed's runtime dependencies (its requirements/requirements.txt) missing on the target
    hjson==3.1.0
    ninja==1.13.2               # only for JIT op builds; small, and DeepSpeed's install would bring it
    py-cpuinfo==9.0.0
    msgpack==1.2.4
    einops==0.8.2
    nvidia-ml-py==13.615.71     # pynvml: DeepSpeed's CUDA accelerator reads memory through it where present
    pydantic==2.13.4            # DeepSpeed's config models; the target may have none
    pydantic-core==2.46.4       # the version pydantic 2.13.4 pins
    annotated-types==0.7.0
    typing-inspection==0.4.2
    typing-extensions==4.16.0   # pydantic 2.13 needs a recent one; torch's may be older, and newer is compatible
)

# built here: no wheel on PyPI
builds=(antlr4-python3-runtime==4.9.3 deepspeed==0.19.8)

mkdir -p "$dest"
rm -f "$dest"/*.whl         # one version of each package: nothing left from an earlier, differently pinned run

echo "downloading ${#downloads[@]} wheels for CPython 3.12 manylinux x86-64 into $dest"
"$py" -m pip download -q --no-deps --only-binary=:all: "${target_tags[@]}" -d "$dest" "${downloads[@]}"

build_dir=$(mktemp -d)
trap 'rm -rf "$build_dir"' EXIT
for spec in "${builds[@]}"; do
    echo "building $spec as a pure-Python wheel"
    # DS_BUILD_OPS=0: DeepSpeed's setup.py compiles no CUDA/C++ op (it needs neither torch nor CUDA to build then)
    DS_BUILD_OPS=0 "$py" -m pip wheel -q --no-deps --no-binary=:all: -w "$build_dir" "$spec"
done
for wheel in "$build_dir"/*.whl; do
    case $(basename "$wheel") in
        *-py3-none-any.whl) mv "$wheel" "$dest"/ ;;
        # a platform wheel here would not install on the target (and would mean DeepSpeed compiled ops after all)
        *) echo "error: $(basename "$wheel") is not a py3-none-any wheel" >&2; exit 1 ;;
    esac
done

echo
wheel_files=("$dest"/*.whl)
for wheel in "${wheel_files[@]}"; do printf '%8s  %s\n' "$(wc -c <"$wheel")" "$(basename "$wheel")"; done
count=${#wheel_files[@]}
bytes=$(cat "${wheel_files[@]}" | wc -c)
mb=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
echo "$count wheels, $mb MiB in $dest"
if awk -v b="$bytes" -v m="$max_mb" 'BEGIN { exit !(b > m * 1048576) }'; then
    echo "error: more than $max_mb MiB: the working tree and the wheels would not fit the 64 MiB that travels" >&2
    exit 1
fi
