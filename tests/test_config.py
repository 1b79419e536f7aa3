"""Config composition and validation: every option builds, every bad input fails with its message."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest
from conftest import CONF, ROOT, compose, run_dirs

from socratic_exp.core.errors import ConfigError, UserError
from socratic_exp.core.run_folder import read_summary
from socratic_exp.runtime.assembly import GROUPS, build_components

OPTIONS = [(group, path.stem) for group in GROUPS for path in sorted((CONF / group).glob("*.yaml"))]
OVERLAYS = [(kind, path.stem) for kind in ("experiment", "debug") for path in sorted((CONF / kind).glob("*.yaml"))]


def test_every_group_has_options():
    for group in GROUPS:
        assert (CONF / group).is_dir(), group
    assert {"arithmetic", "gsm8k", "math500", "aime24", "aime25", "amc23", "multiarith", "sciknoweval"} <= {
        o for g, o in OPTIONS if g == "task"
    }
    assert {"openmath", "dapo_math"} <= {o for g, o in OPTIONS if g == "task"}
    assert {"tiny", "qwen3_0_6b", "qwen3_1_7b", "qwen3_4b", "qwen3_8b"} <= {o for g, o in OPTIONS if g == "model"}
    assert {"wandb", "none"} <= {o for g, o in OPTIONS if g == "logger"}


# what an option needs besides the defaults to build: a mandatory (???) value, or an algorithm without a teacher
REQUIRED_VALUES = {
    "blackbox": ["teacher.model=served-model"],
    "none": ["algorithm=grpo"],
    **{distiller: ["algorithm=socratic_rl"] for distiller in ("kl", "dpo", "sft")},
}


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_composes_and_instantiates(group, option):
    cfg = compose(f"{group}={option}", *REQUIRED_VALUES.get(option, []))
    assert "_target_" in cfg[group]
    components = build_components(cfg)
    built = getattr(components, group)
    # the option's class lives in the package that mirrors its config group
    package = {
        "task": "tasks",
        "model": "models",
        "algorithm": "algorithms",
        "teacher": "teachers",
        "sampler": "samplers",
        "distiller": "distillers",
        "logger": "loggers",
    }[group]
    assert type(built).__module__.startswith(f"socratic_exp.{package}."), type(built).__module__


@pytest.mark.parametrize(("kind", "name"), OVERLAYS, ids=[f"{k}={n}" for k, n in OVERLAYS])
def test_every_overlay_composes(kind, name):
    cfg = compose(f"{kind}={name}")
    build_components(cfg)


def test_debug_overlay_overrides_only_what_differs():
    base, fast = compose(), compose("debug=fast")
    assert fast.algorithm.max_steps == 4 and base.algorithm.max_steps == 30
    assert fast.algorithm.learning_rate == base.algorithm.learning_rate
    assert fast.task == base.task


BAD_INPUTS = [
    (["algorithm=socratic_rl", "teacher=none"], "needs a teacher (fix: choose one"),
    (["algorithm=socratic_rl", "task=gsm8k"], "the rule teacher reflects only on task=arithmetic"),
    (["algorithm=socratic_rl", "algorithm.viewpoint_budget=0"], "algorithm.viewpoint_budget=0: must be >= 1"),
    (["algorithm=socratic_rl", "algorithm.reflect_on=best"], "algorithm.reflect_on='best': expected one of"),
    (["algorithm=socratic_rl", "algorithm.merge_similarity=1.5"], "algorithm.merge_similarity=1.5: must be <= 1"),
    (
        ["algorithm=socratic_rl", "teacher=llm", "teacher.model=m", "teacher.backend=vllm"],
        "algorithm.meta_learning=True: trains the teacher's weights with DPO",
    ),
    (["algorithm=grpo", "distiller=kl"], "has no distillation phase"),
    (
        ["algorithm=socratic_rl", "distiller=kl", "distiller.num_generations=3"],
        "distiller.batch_size=16: must be a multiple",
    ),
    (["algorithm=socratic_rl", "distiller=dpo", "distiller.beta=0"], "distiller.beta=0.0: must be > 0"),
    (["algorithm=socratic_rl", "distiller=sft", "distiller.instruction_template=x"], "must contain {viewpoint}"),
    (["algorithm.max_steps=-1"], "algorithm.max_steps=-1: must be >= 1"),
    (["algorithm.num_generations=3"], "algorithm.num_generations=3: must divide the generation batch"),
    (["algorithm.num_generations=1", "algorithm.batch_size=4"], "algorithm.num_generations=1: must be >= 2"),
    (["algorithm.learning_rate=0"], "algorithm.learning_rate=0.0: must be > 0"),
    (["algorithm.warmup_steps=10"], "algorithm.warmup_steps=10: is ignored by lr_scheduler_type=constant"),
    (["algorithm.learning_rate=fast"], "algorithm.learning_rate='fast': expected float"),
    (["algorithm.loss_type=ppo"], "algorithm.loss_type='ppo': expected one of"),
    (["algorithm=socraticpo", "algorithm.loss_type=grpo"], "algorithm.loss_type='grpo': weighs a token by its packed"),
    (["algorithm.top_p=1.5"], "algorithm.top_p=1.5: must be <= 1.0"),
    (["+algorithm.trl_args.output_dir=x"], "algorithm.trl_args="),
    (["+algorithm.bogus=1"], "algorithm.bogus: unknown key"),
    (["algorithm=entropy_masked", "algorithm.rho=0"], "algorithm.rho=0.0: must be > 0.0"),
    (["algorithm=entropy_masked", "algorithm.rho=1.5"], "algorithm.rho=1.5: must be <= 1.0"),
    (["algorithm=entropy_masked", "algorithm.mode=middle"], "algorithm.mode='middle': expected one of 'top'"),
    (["algorithm=entropy_masked", "algorithm.normalize=tokens"], "algorithm.normalize='tokens': expected one of"),
    (["algorithm=entropy_masked", "+algorithm.trl_args.top_entropy_quantile=0.2"], "sets top_entropy_quantile"),
    (["algorithm=sdpo", "algorithm.feedback=oracle"], "algorithm.feedback='oracle': is not a '+'-joined set"),
    (["algorithm=sdpo", "algorithm.teacher_weights=shared"], "algorithm.teacher_regularization='ema': moves a teacher"),
    (
        ["algorithm=vpd", "algorithm.teacher_weights=copy", "algorithm.teacher_regularization=trust_region"],
        "algorithm.teacher_regularization='trust_region': mixes the live student's logits",
    ),
    (["algorithm=vpd", "algorithm.teacher_regularization=soft"], "algorithm.teacher_regularization='soft': expected"),
    (["algorithm=sdpo", "algorithm.alpha=0.5"], "algorithm.alpha=0.5: sampled-token distillation is the reverse KL"),
    (["algorithm=sdpo", "algorithm.distillation=topk_logits"], "algorithm.topk=None: is the support of topk_logits"),
    (["algorithm=sdpo", "algorithm.reprompt_template=hi"], "algorithm.reprompt_template='hi': must contain {prompt}"),
    (["algorithm=sdpo", "algorithm.hybrid=joint", "algorithm.distill_weight=0", "algorithm.rl_weight=0"], "is empty"),
    (["algorithm=sdpo", "algorithm.hybrid=grpo"], "algorithm.hybrid='grpo': expected one of 'none'"),
    (["algorithm=sdpo", "algorithm.feedback=teacher"], "teacher='none': algorithm.feedback=teacher asks a teacher"),
    (["algorithm=vpd", "algorithm.e_step_beta=0"], "algorithm.e_step_beta=0.0: must be > 0.0"),
    (["algorithm=vpd", "algorithm.e_step_every=0"], "algorithm.e_step_every=0: must be >= 1"),
    (["algorithm=vpd", "algorithm.reference_prior=initial"], "algorithm.reference_prior='initial': expected one of"),
    (["eval.collapse_margin=0.05", "eval.every_steps=0"], "eval.collapse_margin=0.05: watches the evaluations"),
    (["eval.collapse_patience=0"], "eval.collapse_patience=0: must be >= 1"),
    (["task.max_ops=0"], "task.max_ops=0: must be >= 1"),
    (["task.min_ops=3", "task.max_ops=2"], "task.max_ops=2: must be >= task.min_ops (3)"),
    (["task.misconception_rates.precedence=1.5"], "task.misconception_rates="),
    (["task.data_files={train:/no/such/file.jsonl}"], "file '/no/such/file.jsonl' for split 'train' does not exist"),
    (["task.data_files={dev:/etc/hostname}"], "unknown split 'dev'"),
    (["task.data_files={train:/etc}"], "'/etc' for split 'train' is a folder, not a data file"),
    (["task=gsm8k", "task.data_files={eval:/no/such/test.jsonl}"], "file '/no/such/test.jsonl' for split 'eval'"),
    (["task=gsm8k", "task.eval_size=0"], "task.eval_size=0: must be >= 1"),
    (["task=gsm8k", "task.hub_name=''"], "task.hub_name='': must name a Hugging Face Hub dataset"),
    (["task=math500", "task.probe_size=-1"], "task.probe_size=-1: must be >= 0"),
    (["task=sciknoweval", "task.domain=astronomy"], "task.domain='astronomy': expected one of 'chemistry'"),
    (["task=sciknoweval", "task.types=[filling]"], "task.types=['filling']: 'filling' has no verifier"),
    (["task=sciknoweval", "task.types=[mcq-5]"], "'mcq-5' is not a SciKnowEval type"),
    (["task=sciknoweval", "task.types=[]"], "task.types=[]: selects no question type"),
    (["task=sciknoweval", "task.data_dir=/no/such/dir"], "task.data_dir='/no/such/dir': is not a folder"),
    (["task=sciknoweval", "task.test_ratio=1.5"], "task.test_ratio=1.5: must be < 1.0"),
    (["task=dapo_math", "task.eval_set=gsm8k"], "task.eval_set='gsm8k': is not an evaluation set"),
    (["task=openmath", "task.hub_rows=0"], "task.hub_rows=0: must be >= 1"),
    (["task=openmath", "+task.bogus=1"], "task.bogus: unknown key"),
    (["model.num_heads=5"], "model.num_heads=5: must divide model.hidden_size (128)"),
    (["model.warmstart_steps=-5"], "model.warmstart_steps=-5: must be >= 0"),
    (["model=qwen3_4b", "model.name=''"], "model.name='': must name a Hub model"),
    (["eval.pass_k=-1"], "eval.pass_k=-1: must be >= 0"),
    (["+eval.bogus=1"], "eval.bogus: unknown key"),
    (["seed=-3"], "seed=-3: must be an integer >= 0"),
    (["objective=eval/acc"], "objective='eval/acc': is not a metric the evaluation reports"),
    (["objective=eval/pass@4", "eval.pass_k=2"], "objective='eval/pass@4': is not a metric"),
    (["objective=eval/greedy_acc/group_mean"], "objective='eval/greedy_acc/group_mean': is not a metric"),
    (["logger.mode=sometimes"], "logger.mode='sometimes': expected one of"),
    (["teacher=blackbox"], "teacher.model: has no value"),
    (["teacher=blackbox", "teacher.model=m", "teacher.max_concurrency=0"], "teacher.max_concurrency=0: must be >= 1"),
    (["teacher=blackbox", "teacher.model=m", "teacher.base_url=localhost:8000"], "is not an http(s) URL"),
    (["teacher=blackbox", "teacher.model=m", "teacher.timeout_s=0"], "teacher.timeout_s=0.0: must be > 0"),
    (["teacher=llm", "teacher.backend=vllm"], "teacher.backend='vllm': self-guidance"),
    (["teacher=llm", "teacher.template=hello"], "teacher.template='hello': must contain {question}"),
    (["teacher=rule", "teacher.min_occurrences=0"], "teacher.min_occurrences=0: must be >= 1"),
    (["teacher=rule", "eval.assisted_attempts=0"], "eval.assisted_attempts=0: must be >= 1"),
    (["algorithm=grpo", "objective=eval/assisted_acc"], "objective='eval/assisted_acc': is not a metric"),
    (["sampler=goldilocks", "sampler.candidates=0"], "sampler.candidates=0: must be >= 1"),
    (["sampler=goldilocks", "sampler.epsilon=1.5"], "sampler.epsilon=1.5: must be <= 1.0"),
    (["sampler=goldilocks", "sampler.temperature=0"], "sampler.temperature=0.0: must be > 0.0"),
    (["sampler=goldilocks", "sampler.selection=top"], "sampler.selection='top': expected one of 'greedy'"),
    (["sampler=goldilocks", "sampler.loss=huber"], "sampler.loss='huber': expected one of 'mae'"),
    (["sampler=goldilocks", "sampler.features=embedding_model"], "sampler.embedding_model=None: is the encoder"),
    (["sampler=goldilocks", "sampler.embedding_model=x"], "sampler.embedding_model='x': is the encoder"),
    (["sampler=goldilocks", "sampler.features=none"], "sampler.features='none': none leaves the predictor"),
    (["sampler=goldilocks", "+sampler.bogus=1"], "sampler.bogus: unknown key"),
]


@pytest.mark.parametrize(("overrides", "message"), BAD_INPUTS, ids=[" ".join(o) for o, _ in BAD_INPUTS])
def test_bad_inputs_fail_with_their_message(overrides, message):
    with pytest.raises(UserError) as raised:
        build_components(compose(*overrides))
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)
    assert "fix:" in str(raised.value) or isinstance(raised.value, ConfigError)


def test_validation_does_not_import_heavy_libraries():
    every_option = [[f"{group}={option}", *REQUIRED_VALUES.get(option, [])] for group, option in OPTIONS]
    code = (
        "import sys; from socratic_exp.core.config import compose;"
        "from socratic_exp.runtime.assembly import build_components;"
        f"[build_components(compose(*overrides)) for overrides in {every_option!r}];"
        "heavy = [m for m in ('torch', 'transformers', 'trl', 'wandb', 'datasets', 'openai') if m in sys.modules];"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--help"], "algorithm: entropy_masked, grpo"),
        (["--info"], "Config search path"),
        (["--cfg", "job"], "_target_: socratic_exp"),
    ],
)
def test_hydra_flags_work(run_app, args, expected):
    proc, _ = run_app(*args, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert expected in proc.stdout


@pytest.mark.parametrize(
    ("overrides", "message", "code"),
    [
        (["algorithm.max_steps=-1"], "error: algorithm.max_steps=-1: must be >= 1", 2),
        (["resume=/no/such/run"], "error: resume='/no/such/run': is not a run folder", 2),
        (["algorithm=nope"], "error: In 'config': Could not find 'algorithm/nope' Available options in", 2),
        (
            ["algorithm.nope=1"],
            "error: Could not override 'algorithm.nope'. To append to your config use "
            "+algorithm.nope=1 Key 'nope' is not in struct",
            2,
        ),
        (
            ["hydra.run.dir=/proc/no/such"],
            "error: cannot create the run folder /proc/no (No such file or directory) (fix: a writable folder: "
            "hydra.run.dir=<folder>",  # /proc/no: the first part that cannot be made
            2,
        ),
        (
            ["hydra.run.dir=/etc/hostname/x"],
            "error: cannot create the run folder /etc/hostname/x (a file is in the way)",
            2,
        ),
    ],
)
def test_cli_errors_are_one_clear_line(run_app, overrides, message, code):
    proc, outputs = run_app(*overrides, timeout=60)
    assert proc.returncode == code
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for run_dir in run_dirs(outputs):
        assert read_summary(run_dir)["status"] == "failed"


def test_dry_run_validates_without_training(run_app):
    proc, outputs = run_app("dry_run=true", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "config OK" in proc.stdout
    assert not run_dirs(outputs)


def test_wheel_ships_the_configs(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 and "hatchling" in proc.stderr:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), str(ROOT)],
            capture_output=True,
            text=True,
        )
    assert proc.returncode == 0, proc.stderr
    wheel = next(tmp_path.glob("socratic_exp-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "socratic_exp/conf/config.yaml" in names
    assert "socratic_exp/conf/algorithm/grpo.yaml" in names
    assert "hydra_plugins/socratic_exp_launcher/local_launcher.py" in names  # the default sweep launcher
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "socratic_exp", "--cfg", "job"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr
    assert "socratic_exp.algorithms.socraticpo.config.SocraticPO" in run.stdout


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_yaml_values_match_the_class_defaults(group, option):
    """A YAML is the documented default; the class's own defaults (for programmatic use) must not drift from it."""
    import dataclasses

    from hydra.utils import get_class
    from omegaconf import OmegaConf

    node = OmegaConf.load(CONF / group / f"{option}.yaml")
    if "_target_" not in node:
        pytest.skip("a preset: it overrides the option it extends on purpose")
    if "defaults" in node:  # an option extending another (e.g. socraticpo extends grpo): the keys it ends up with
        node = compose(f"{group}={option}")[group]
    fields = {f.name: f for f in dataclasses.fields(get_class(node._target_))}
    for key in node:
        if key == "_target_" or OmegaConf.is_interpolation(node, key) or OmegaConf.is_missing(node, key):
            continue
        field = fields[key]
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            continue
        value = OmegaConf.to_container(node[key]) if OmegaConf.is_config(node[key]) else node[key]
        if dataclasses.is_dataclass(default):  # a nested block, e.g. model.lora
            default = dataclasses.asdict(default)
        assert value == default, f"{group}/{option}.yaml {key}={value!r} but the class default is {default!r}"


def test_missing_hub_model_offline_is_one_line(run_app):
    proc, outputs = run_app("model=qwen3_0_6b", "logger=none", env={"HF_HUB_OFFLINE": "1"}, timeout=180)
    assert proc.returncode == 2
    assert "error: model.name=Qwen/Qwen3-0.6B: the Hugging Face Hub model could not be loaded" in proc.stderr
    assert "hf download Qwen/Qwen3-0.6B" in proc.stderr
    assert "Traceback" not in proc.stderr
    (run_dir,) = run_dirs(outputs)
    assert read_summary(run_dir)["status"] == "failed"


def test_default_is_socraticpo_which_brings_the_rule_teacher_unless_another_is_named():
    def teacher(*overrides: str) -> str:
        return compose(*overrides).teacher._target_.rsplit(".", 1)[1]

    assert compose().algorithm._target_.endswith("SocraticPO")
    assert teacher() == "RuleTeacher"
    assert teacher("teacher=llm") == "LLMTeacher"
    assert teacher("algorithm=grpo") == "NoTeacher"
    assert teacher("algorithm=grpo", "teacher=rule") == "RuleTeacher"


def test_a_config_file_is_parsed_once_and_read_again_when_it_changes(tmp_path):
    """compose() hands Hydra a copy of each file parsed once: what Hydra merges into it never reaches the next
    compose, and a file edited on disk is read again."""
    import os

    from hydra._internal.core_plugins.file_config_source import FileConfigSource

    from socratic_exp.core.config import parse_config_files_once

    parse_config_files_once()
    source = FileConfigSource(provider="test", path=str(tmp_path))
    option = tmp_path / "option.yaml"
    option.write_text("# @package _global_\nlr: 1\n")
    first = source.load_config("option.yaml")
    assert (first.config.lr, first.header["package"]) == (1, "_global_")
    first.config.lr = 5  # as Hydra merges into what it loaded
    assert source.load_config("option.yaml").config.lr == 1
    option.write_text("# @package _global_\nlr: 2\n")  # the same size: its time tells
    stat = option.stat()
    os.utime(option, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert source.load_config("option.yaml").config.lr == 2
    assert compose("algorithm.learning_rate=3e-6").algorithm.learning_rate == 3e-6  # composing goes on as before
