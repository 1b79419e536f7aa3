"""What each process will hold, before it holds it: ``plan_memory(components)`` sizes the student's weights, gradients
and optimizer state and every other copy of weights the run's options allocate, per process and over all processes,
without loading a weight (``MemoryPlan.table()`` renders it for the console, ``MemoryPlan.rows`` is the data).

**Parameters** are counted exactly, by instantiating the model class on the ``meta`` device (no memory): ``model=tiny``
from the settings' own ``build_untrained``; a Hub model from its config in the Hugging Face cache
(``AutoConfig.from_pretrained(..., local_files_only=True)``), else from the architecture fields shipped for the
presets' models (``architectures.json``); a name in neither is one row that says so. LoRA adapters are counted from
the same modules: r x (in + out) for each targeted linear layer (``all-linear``: every one but the output layer, as
peft; null: peft's default targets for the architecture).

**Precision, as a run sets it** (TRL 1.16, transformers 5, peft 0.21, torch 2.x):

- The student loads as ``model.dtype`` says (``models/hub.py`` ``load_pretrained``: ``auto`` is bfloat16 on a CUDA GPU
  with bf16, else float32); ``model=tiny`` loads its checkpoint's float32 (transformers 5's ``from_pretrained``
  defaults to the checkpoint's dtype).
- ``algorithm.bf16`` (null: on for a CUDA GPU with bf16) is TrainingArguments' ``bf16``: accelerate's bf16 *autocast*,
  which casts no weight (``TrainingArguments.mixed_precision``; the Trainer casts only for ``bf16_full_eval``). A
  launch's ``mixed_precision`` (the accelerate config) applies where ``bf16`` is off.
- Gradients take their parameter's dtype, and torch's AdamW (TrainingArguments' default optimizer) keeps its two
  moments ``zeros_like(param)``: weights loaded in bf16 train with bf16 gradients and bf16 moments (2 + 2 + 4 bytes a
  parameter, no fp32 master copy); fp32 weights under bf16 autocast keep fp32 everything (4 + 4 + 8).
- LoRA adapters are float32 even on a bf16 base: TRL calls ``get_peft_model`` with peft's default
  ``autocast_adapter_dtype=True`` (``GRPOTrainer.__init__``), except under ZeRO-3 where it keeps the base's dtype.
- TRL's reference model (``beta`` > 0, no LoRA) is rebuilt from the student's path at the student's dtype
  (``GRPOTrainer.__init__``: ``dtype=self.model.dtype``); ZeRO-3 shards it, ZeRO-2 keeps it whole. The project's own
  frozen copies (``models.base.frozen_copy``) gather a ZeRO-3 model and keep it whole on every process.
- DeepSpeed ZeRO (``launch/accelerate/zero2.yaml``, ``zero3.yaml``, mixed precision bf16): the engine casts the module
  to bf16 and its optimizer keeps an fp32 master copy of its partition and fp32 moments: 12 bytes a trainable
  parameter divided by the processes (stage 1 and up); stage 2 also divides the gradients, stage 3 the weights (the
  ZeRO paper's 2 + 2 + 12 bytes). DeepSpeed is not installed here: this is DeepSpeed's documented design, not read
  from its code. FSDP2 (``fsdp2.yaml``) is not planned: accelerate upcasts its trainable parameters to fp32 when mixed
  precision is on (``accelerate.utils.fsdp_utils``).
- Several processes without ZeRO are DDP, whose reducer keeps a flat gradient bucket per parameter group as well as
  each ``.grad`` (transformers does not set ``gradient_as_bucket_view``): one more gradient-sized buffer.
- TRL's vLLM colocate mode starts ``vllm.LLM(model=<the student's path>)`` in each training process: a second copy of
  the weights (16 bit), inside the ``vllm_gpu_memory_utilization`` share of the GPU that vLLM reserves for itself with
  its KV cache (TRL's default 0.3); it is shown, and not added to the training total.

**What each option allocates besides the student** is its own knowledge: an option's class may define
``model_copies(components) -> list[ModelCopy]``, which this module sizes; it names no option itself.

Not included (the table says so): activations, the KV cache of generation, the loss's logits, temporary buffers
(ZeRO's buckets and gathered layers), the CUDA context and the allocator's fragmentation, and vLLM's own share.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from socratic_exp.algorithms.base import Options
    from socratic_exp.models.base import ModelSpec

ARCHITECTURES = Path(__file__).with_name("architectures.json")
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
ADAMW_MOMENTS = 2  # exp_avg and exp_avg_sq (the step counter is a scalar)
ZERO_OPTIMIZER_BYTES = 12  # DeepSpeed ZeRO: fp32 master weights (4) + fp32 exp_avg (4) + fp32 exp_avg_sq (4)
Device = Literal["cuda_bf16", "cuda", "cpu"]

# What a ModelCopy is a copy of (``of``); a Hub model is named as HUB + its name or folder.
STUDENT = "student"  # the student's weights, all of them (a full frozen copy)
TRAINABLE = "trainable"  # what the student trains: all its weights, or its LoRA adapter
ADAPTER = "adapter"  # one LoRA adapter (a second adapter over the shared base weights)
SHARED = "shared"  # no memory of its own: the student's weights, seen another way
PARAMETERS = "parameters"  # an explicit count (``ModelCopy.parameters``), e.g. a small head
HUB = "hub:"


@dataclasses.dataclass(frozen=True)
class ModelCopy:
    """Something an option allocates besides the student's own weights, gradients and optimizer state."""

    name: str  # the row's label, e.g. "reference model (beta=0.04)"
    of: str = STUDENT  # STUDENT | TRAINABLE | ADAPTER | SHARED | PARAMETERS | HUB + name
    state: Literal["weights", "gradients", "moments"] = "weights"  # moments: AdamW's two per parameter
    dtype: str | None = None  # None: as what it copies (a Hub model: its checkpoint's); "auto" as model.dtype
    trainable: bool = False
    on_host: bool = False  # in CPU memory, not on the GPU
    sharded: bool = False  # divided over the processes under ZeRO-3 (TRL's own models); else whole on each
    phase: str | None = None  # None: held for the whole run; else when it exists (not added to the total)
    counted: bool = True  # False: shown, but inside memory reserved elsewhere (vLLM's share of the GPU)
    divide: int = 1  # split over this many processes (vLLM's tensor parallelism)
    parameters: int | None = None  # with of=PARAMETERS
    encoder: bool = False  # a Hub model loaded with AutoModel (no LM head), not AutoModelForCausalLM
    key: str = ""  # a short stable name for code and tests (default: the name)
    note: str = ""
    evidence: str = ""  # where it is allocated


def frozen_initial_student(name: str, key: str, lora: bool, evidence: str) -> ModelCopy:
    """The student as it started, kept frozen (a KL's initial policy, a fixed prior, a trust region's anchor):
    ``frozen_copy`` of the student at its dtype, whole on every process (it gathers a ZeRO-3 model); under LoRA the
    base model with the adapters disabled, which costs nothing."""
    if lora:
        return ModelCopy(name, of=SHARED, key=key, note="the base model with the adapters disabled")
    return ModelCopy(
        name, of=STUDENT, key=key, note="frozen_copy of the student, whole on every process", evidence=evidence
    )


@dataclasses.dataclass(frozen=True)
class MemoryRow:
    key: str  # weights | adapters | gradients | optimizer | ddp_buckets | student | a copy's key
    item: str
    source: str  # "student", or the config group whose option allocates it
    parameters: int | None  # None: unknown, or shared weights
    dtype: str | None
    trainable: bool
    where: str  # GPU | CPU
    per_process: int | None  # bytes on each process (None: unknown)
    total: int | None  # bytes over all processes
    held: bool  # added to the totals (a phase's rows and vLLM's copy are not)
    state: str = "weights"  # weights | gradients | moments
    phase: str | None = None
    note: str = ""
    evidence: str = ""


@dataclasses.dataclass(frozen=True)
class Precision:
    device: Device
    loaded: str  # the student's weights as loaded
    weights: str  # as trained (DeepSpeed casts the module to its mixed precision)
    adapters: str
    mixed_precision: str  # no | bf16 | fp16 (autocast, or DeepSpeed's)
    why: str


@dataclasses.dataclass(frozen=True)
class Architecture:
    name: str
    parameters: int
    linears: tuple[tuple[str, int, int], ...]  # (module, in, out) of every nn.Linear
    output_layer: str  # the output embedding's module name (all-linear LoRA leaves it out)
    model_type: str
    dtype: str  # the checkpoint's
    source: str


@dataclasses.dataclass
class MemoryPlan:
    model: str
    parameters: int | None
    architecture: str  # where the count came from, or why there is none
    processes: int
    zero_stage: int | None
    precision: Precision | None
    rows: list[MemoryRow]
    notes: list[str]

    def held(self, where: str = "GPU") -> int | None:
        """Bytes each process holds for the whole run on ``where`` (None: a row's size is unknown)."""
        sizes = [r.per_process for r in self.rows if r.held and r.where == where]
        return None if None in sizes else sum(sizes)  # type: ignore[arg-type]

    def peak(self, where: str = "GPU") -> int | None:
        """``held`` plus the largest phase's extra (a distillation, an E-step...), each process."""
        held = self.held(where)
        phases: dict[str, int] = {}
        for r in self.rows:
            if r.phase and r.where == where and r.per_process is not None:
                phases[r.phase] = phases.get(r.phase, 0) + r.per_process
        return None if held is None else held + max(phases.values(), default=0)

    def table(self) -> str:
        """The plan as a plain-text table, its notes below."""
        return _render(self)


# --- the plan -----------------------------------------------------------------------------------------------------
def plan_memory(
    components: Options,
    processes: int = 1,
    zero_stage: int | None = None,
    mixed_precision: str | None = None,
    device: Device | None = None,
) -> MemoryPlan:
    """What each of ``processes`` processes will hold for ``components``' run.

    ``zero_stage``: DeepSpeed ZeRO's stage (None or 0: none; several processes are then DDP). ``mixed_precision``:
    the launch's (accelerate config's ``mixed_precision``: no | bf16 | fp16; None: none), which applies where the
    algorithm's ``bf16`` is off, and sets DeepSpeed's. ``device``: what the run trains on, which decides
    ``model.dtype: auto`` and ``algorithm.bf16: null`` (cuda_bf16: a GPU with bf16, Ampere or later; cuda: one
    without; cpu); None: this machine's."""
    if processes < 1:
        raise ValueError(f"processes={processes}: must be >= 1")
    if zero_stage not in (None, 0, 1, 2, 3):
        raise ValueError(f"zero_stage={zero_stage}: must be 0, 1, 2, 3 or None")
    if mixed_precision not in (None, "no", "bf16", "fp16"):
        raise ValueError(f"mixed_precision={mixed_precision}: must be no, bf16, fp16 or None")
    if device not in (None, "cuda_bf16", "cuda", "cpu"):
        raise ValueError(f"device={device}: must be cuda_bf16, cuda, cpu or None (this machine's)")
    zero = zero_stage or 0
    device = device or this_device()
    spec = components.model
    name = student_name(spec)
    arch = student_architecture(spec)
    if isinstance(arch, str):
        row = MemoryRow("student", f"student {name}", "student", None, None, True, "GPU", None, None, True, note=arch)
        return MemoryPlan(name, None, arch, processes, zero_stage, None, [row], [arch, NOT_INCLUDED])
    precision = resolve_precision(components, device, zero, mixed_precision)
    sizer = _Sizer(components, arch, precision, processes, zero, device)
    rows = sizer.student_rows()
    for group in ("task", "algorithm", "teacher", "sampler", "distiller", "logger"):
        hook = getattr(getattr(components, group), "model_copies", None)
        if callable(hook):
            rows += [sizer.copy_row(copy, group) for copy in hook(components)]
    notes = [precision.why, *(f"{r.item}: {r.note}" for r in rows if r.note), NOT_INCLUDED]
    return MemoryPlan(name, arch.parameters, arch.source, processes, zero_stage, precision, rows, notes)


def launch_settings(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``plan_memory``'s ``processes``, ``zero_stage`` and ``mixed_precision`` as ``accelerate launch`` (or torchrun)
    set them for this process: ``WORLD_SIZE``, ``ACCELERATE_USE_DEEPSPEED`` with ``ACCELERATE_DEEPSPEED_ZERO_STAGE``,
    ``ACCELERATE_MIXED_PRECISION``. (An FSDP launch is planned as DDP: its sharding is not modelled.)"""
    env = os.environ if environ is None else environ
    deepspeed = env.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true"
    stage = env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "")
    mixed = env.get("ACCELERATE_MIXED_PRECISION") or None
    return {
        "processes": int(env.get("WORLD_SIZE") or 1),
        "zero_stage": int(stage) if deepspeed and stage.isdigit() else None,
        "mixed_precision": mixed if mixed in ("no", "bf16", "fp16") else None,
    }


NOT_INCLUDED = (
    "NOT included: activations (they grow with batch x length x layers; gradient_checkpointing cuts them), the KV "
    "cache of generation, the loss's vocabulary-wide logits, temporary buffers (ZeRO's buckets and gathered layers), "
    "the CUDA context (~0.5-1 GiB a process), the allocator's fragmentation, and vLLM's own share of the GPU "
    "(vllm_gpu_memory_utilization: its copy of the weights and its KV cache)"
)


def this_device() -> Device:
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    return "cuda_bf16" if torch.cuda.is_bf16_supported() else "cuda"


def resolve_precision(components: Options, device: Device, zero: int, launch: str | None) -> Precision:
    """The dtypes the run will use (the module docstring says where each rule comes from)."""
    spec, algorithm = components.model, components.algorithm
    loaded, why = _loaded_dtype(spec, device)
    trl_args = getattr(algorithm, "trl_args", {}) or {}
    bf16 = getattr(algorithm, "bf16", None)
    bf16 = device == "cuda_bf16" if bf16 is None else bf16  # GRPOBuild.trl_kwargs: null is on for a GPU with bf16
    mixed = "bf16" if bf16 else "fp16" if trl_args.get("fp16") else (launch or "no")
    if device == "cpu" and not bf16:
        mixed = "no"  # use_cpu: no autocast from a GPU launch config
    # TRL's continuous-batching generation casts the student itself to bf16 at its first generation
    if bf16 and (trl_args.get("use_transformers_continuous_batching") or trl_args.get("use_transformers_paged")):
        loaded, why = "bfloat16", why + "; cast to bfloat16 by TRL's continuous-batching generation"
    weights = {"bf16": "bfloat16", "fp16": "float16"}.get(mixed, loaded) if zero else loaded
    adapters = weights if zero else ("float32" if BYTES[loaded] == 2 else loaded)
    autocast = f"{mixed} mixed precision" if mixed != "no" else "no mixed precision"
    optimizer = (
        "DeepSpeed ZeRO: fp32 master weights + 2 fp32 AdamW moments"
        if zero
        else f"gradients and AdamW moments in the trained weights' dtype ({adapters if spec.lora.enabled else weights})"
    )
    text = f"precision: weights {loaded} ({why}), {autocast}"
    text += f", DeepSpeed casts them to {weights}" if weights != loaded else ""
    text += f", LoRA adapters {adapters}" if spec.lora.enabled else ""
    return Precision(device, loaded, weights, adapters, mixed, f"{text}; {optimizer}")


def _loaded_dtype(spec: ModelSpec, device: Device) -> tuple[str, str]:
    dtype = getattr(spec, "dtype", None)
    if dtype is None:  # model=tiny: from_pretrained keeps its checkpoint's float32
        return "float32", "model=tiny's checkpoint"
    if dtype == "auto":
        resolved = "bfloat16" if device == "cuda_bf16" else "float32"
        return resolved, f"model.dtype=auto on {'a GPU with bf16' if device == 'cuda_bf16' else device}"
    return dtype, f"model.dtype={dtype}"


# --- sizes --------------------------------------------------------------------------------------------------------
class _Sizer:
    def __init__(
        self, components: Options, arch: Architecture, precision: Precision, processes: int, zero: int, device: str
    ):
        self.components, self.arch, self.precision = components, arch, precision
        self.processes, self.zero, self.device = processes, zero, device
        self.lora = components.model.lora
        self.adapter = adapter_parameters(arch, self.lora) if self.lora.enabled else 0

    def trainable(self) -> tuple[int, str]:
        p = self.precision
        return (self.adapter, p.adapters) if self.lora.enabled else (self.arch.parameters, p.weights)

    def row(self, key: str, item: str, parameters: int | None, dtype: str | None, bytes_each: int | None,
            *, source: str = "student", trainable: bool = False, on_host: bool = False, divide: int = 1,
            held: bool = True, state: str = "weights", phase: str | None = None, note: str = "",
            evidence: str = "") -> MemoryRow:  # fmt: skip
        per_process = None if bytes_each is None else -(-bytes_each // divide)  # exact integer ceiling
        total = None if per_process is None else per_process * self.processes
        where = "CPU" if on_host or self.device == "cpu" else "GPU"
        return MemoryRow(key, item, source, parameters, dtype, trainable, where, per_process, total,
                         held and phase is None, state, phase, note, evidence)  # fmt: skip

    def student_rows(self) -> list[MemoryRow]:
        p, n, zero, lora = self.precision, self.processes, self.zero, self.lora
        stage3 = n if zero >= 3 else 1
        count, dtype = self.trainable()
        everything = self.arch.parameters
        base = "student base weights (frozen)" if lora.enabled else "student weights"
        rows = [self.row("weights", base, everything, p.weights, everything * BYTES[p.weights], divide=stage3,
                         trainable=not lora.enabled)]  # fmt: skip
        if lora.enabled:
            targets = lora.target_modules
            shown = targets if isinstance(targets, str) else "peft's default" if targets is None else ",".join(targets)
            item = f"LoRA adapters (r={lora.r}, {shown})"
            rows.append(self.row("adapters", item, count, dtype, count * BYTES[dtype], divide=stage3, trainable=True))
        stage2 = n if zero >= 2 else 1
        rows.append(
            self.row("gradients", "gradients", count, dtype, count * BYTES[dtype], divide=stage2, state="gradients")
        )
        if zero:
            item = "optimizer: fp32 master + 2 AdamW moments (ZeRO)"
            rows.append(
                self.row("optimizer", item, count, "float32", count * ZERO_OPTIMIZER_BYTES, divide=n, state="moments")
            )
        else:
            item = "optimizer: 2 AdamW moments"
            rows.append(
                self.row("optimizer", item, count, dtype, ADAMW_MOMENTS * count * BYTES[dtype], state="moments")
            )
        if n > 1 and not zero:
            note = "DDP's flat buckets beside each .grad (gradient_as_bucket_view is off)"
            rows.append(
                self.row(
                    "ddp_buckets",
                    "DDP gradient buckets",
                    count,
                    dtype,
                    count * BYTES[dtype],
                    state="gradients",
                    note=note,
                )
            )
        return rows

    def copy_row(self, copy: ModelCopy, group: str) -> MemoryRow:
        p = self.precision
        note, parameters, dtype = copy.note, None, copy.dtype
        if copy.of == SHARED:
            parameters, dtype, size = 0, None, 0
        else:
            if copy.of == STUDENT:
                # TRL's own models go through DeepSpeed (its dtype); frozen copies keep the loaded dtype
                parameters, own = self.arch.parameters, p.weights if copy.sharded else p.loaded
            elif copy.of == TRAINABLE:
                parameters, own = self.trainable()
            elif copy.of == ADAPTER:
                parameters, own = self.adapter, p.adapters
            elif copy.of == PARAMETERS:
                parameters, own = copy.parameters, "float32"
            elif copy.of.startswith(HUB):
                other = hub_architecture(copy.of.removeprefix(HUB), encoder=copy.encoder)
                if isinstance(other, str):
                    parameters, own, note = None, None, f"{other}{'; ' + note if note else ''}"
                else:
                    parameters, own = other.parameters, other.dtype
            else:
                raise ValueError(f"{group}: ModelCopy {copy.name!r} copies {copy.of!r}, which is no known kind")
            if dtype == "auto":  # as model.dtype=auto resolves
                dtype = "bfloat16" if self.device == "cuda_bf16" else "float32"
            dtype = dtype or own
            multiplier = ADAMW_MOMENTS if copy.state == "moments" else 1
            size = None if parameters is None or dtype is None else multiplier * parameters * BYTES[dtype]
        divide = copy.divide * (self.processes if copy.sharded and self.zero >= 3 else 1)
        return self.row(copy.key or copy.name, copy.name, parameters, dtype, size, source=group,
                        trainable=copy.trainable, on_host=copy.on_host, divide=divide, held=copy.counted,
                        state=copy.state, phase=copy.phase, note=note, evidence=copy.evidence)  # fmt: skip


# --- architectures ------------------------------------------------------------------------------------------------
def student_name(spec: ModelSpec) -> str:
    name = getattr(spec, "name", None)
    return name if name else f"model=tiny ({type(spec).__name__})"


def student_architecture(spec: ModelSpec) -> Architecture | str:
    """The student's architecture (its parameters counted on the meta device), or why it is unknown."""
    build = getattr(spec, "build_untrained", None)
    if callable(build):  # model=tiny: its own builder, with the character tokenizer it trains with
        return _built_architecture(build, type(spec).__name__)
    name = getattr(spec, "name", None)
    if not name:
        return f"{type(spec).__name__} names no model and builds none: its size is unknown"
    if name.lower().endswith(".gguf"):
        return f"{name}: a .gguf file's architecture is read when it is converted, so it is not planned"
    return hub_architecture(name, getattr(spec, "revision", None), getattr(spec, "trust_remote_code", False))


def _built_architecture(build: Any, label: str) -> Architecture:
    import torch

    from socratic_exp.models.char_tokenizer import build_char_tokenizer

    with torch.device("meta"):
        model = build(build_char_tokenizer())
    return _measured(model, label, "float32", "its settings, built on the meta device")


@functools.cache
def hub_architecture(
    name: str, revision: str | None = None, trust_remote_code: bool = False, encoder: bool = False
) -> Architecture | str:
    """A Hub model's (or local folder's) architecture from the HF cache, else from ``architectures.json``; a string
    saying why when neither has it."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(
            name, local_files_only=True, revision=revision, trust_remote_code=trust_remote_code
        )
        source = "the local folder's config.json" if Path(name).is_dir() else "the HF cache's config.json"
    except (OSError, ValueError, KeyError):
        fields = shipped_architectures().get(name)
        if fields is None:
            return (
                f"{name} is not in the Hugging Face cache nor among the shipped architectures "
                f"(models/{ARCHITECTURES.name}): its size is unknown (download its config.json, or pass a local folder)"
            )
        fields = dict(fields)
        config = AutoConfig.for_model(fields.pop("model_type"), **fields)
        source = f"the shipped architecture snapshot, models/{ARCHITECTURES.name}"
    auto = AutoModel if encoder else AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(config, trust_remote_code=trust_remote_code)
    dtype = str(getattr(config, "dtype", None) or "float32").removeprefix("torch.")
    return _measured(model, name, dtype if dtype in BYTES else "float32", source)


def _measured(model: Any, name: str, dtype: str, source: str) -> Architecture:
    import torch

    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    modules = list(model.named_modules())
    linears = tuple((n, m.in_features, m.out_features) for n, m in modules if isinstance(m, torch.nn.Linear))
    output_name = next((n for n, m in modules if output is not None and m is output), "")
    parameters = sum(p.numel() for p in model.parameters())  # tied weights counted once
    model_type = getattr(getattr(model, "config", None), "model_type", "") or ""
    return Architecture(name, parameters, linears, output_name, model_type, dtype, source)


@functools.cache
def shipped_architectures() -> dict[str, dict[str, Any]]:
    return {k: v for k, v in json.loads(ARCHITECTURES.read_text()).items() if not k.startswith("_")}


def adapter_parameters(arch: Architecture, lora: Any) -> int:
    """LoRA's parameters: r x (in + out) per targeted linear layer, chosen as peft chooses them."""
    import re

    targets = lora.target_modules
    if targets is None:  # peft's per-architecture default
        try:
            from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as DEFAULTS
        except ImportError:
            DEFAULTS = {}
        targets = list(DEFAULTS.get(arch.model_type, ["q_proj", "v_proj"]))

    def chosen(name: str) -> bool:
        if targets == "all-linear":
            return name != arch.output_layer
        if isinstance(targets, str):
            return re.fullmatch(targets, name) is not None
        return any(name == t or name.endswith("." + t) for t in targets)

    return sum(lora.r * (fan_in + fan_out) for name, fan_in, fan_out in arch.linears if chosen(name))


# --- the table ----------------------------------------------------------------------------------------------------
def size_text(size: int | None) -> str:
    if size is None:
        return "unknown"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{size} B"


DEVICES = {"cuda_bf16": "a CUDA GPU with bf16", "cuda": "a CUDA GPU without bf16", "cpu": "the CPU"}


def _render(plan: MemoryPlan) -> str:
    import textwrap

    n = plan.processes
    how = f"ZeRO-{plan.zero_stage}" if plan.zero_stage else "DDP" if n > 1 else "no sharding"
    head = f"Memory plan: {plan.model}"
    if plan.parameters is not None:
        head += f", {plan.parameters:,} parameters (from {plan.architecture})"
    lines = [head, f"{n} process{'es' if n > 1 else ''} ({how})"]
    if plan.precision:
        lines[-1] += f", planned for {DEVICES[plan.precision.device]}"
    header = ("item", "parameters", "dtype", "trains", "on", "each process", f"all {n}" if n > 1 else "in all")
    table = [header]
    for row in plan.rows:
        label = row.item + (f" [{row.phase}]" if row.phase else "" if row.held else " [not in total]")
        params = "shared" if row.parameters == 0 else "?" if row.parameters is None else f"{row.parameters:,}"
        trains = "-" if row.state != "weights" else "yes" if row.trainable else "no"
        sizes = ("-", "-") if row.parameters == 0 else (size_text(row.per_process), size_text(row.total))
        table.append((label, params, row.dtype or "-", trains, row.where, *sizes))
    totals = []
    for where in ("GPU", "CPU"):
        if any(r.where == where for r in plan.rows):
            held, peak = plan.held(where), plan.peak(where)
            if held is None:  # the known rows' sum, marked as a lower bound
                known = [r.per_process for r in plan.rows if r.held and r.where == where and r.per_process]
                at_least = f">= {size_text(sum(known))}" if known else "unknown"
                totals.append((f"TOTAL held ({where})", "", "", "", where, at_least, "unknown"))
                continue
            totals.append((f"TOTAL held ({where})", "", "", "", where, size_text(held), size_text(held * n)))
            if peak != held:
                totals.append(("  peak, with the largest phase", "", "", "", where, size_text(peak),
                               size_text(_times(peak, n))))  # fmt: skip
    widths = [max(len(r[i]) for r in table + totals) for i in range(len(header))]
    rule = "  ".join("-" * w for w in widths)
    for i, cells in enumerate(table + totals):
        if i in (1, len(table)):
            lines.append(rule)
        aligned = [c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(cells, widths, strict=True))]
        lines.append("  ".join(aligned).rstrip())
    lines.append("")
    lines += [textwrap.fill(note, width=120, initial_indent="- ", subsequent_indent="  ") for note in plan.notes]
    return "\n".join(lines)


def _times(size: int | None, n: int) -> int | None:
    return None if size is None else size * n
