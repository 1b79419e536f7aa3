"""``python -m socratic_exp.models.memory``: the memory plan of any config for any launch."""

from __future__ import annotations

from socratic_exp.models.memory import plan_memory


def main(argv: list[str] | None = None) -> int:
    """``python -m socratic_exp.models.memory [overrides] [--device cuda_bf16 --processes 8 --zero-stage 3]``: the
    plan of any config for any launch, from any machine (``dry_run=true`` plans for this machine and its launch)."""
    import argparse

    from socratic_exp.core.config import compose
    from socratic_exp.core.errors import or_exit_code
    from socratic_exp.runtime.assembly import build_components

    parser = argparse.ArgumentParser(prog="python -m socratic_exp.models.memory", description=main.__doc__)
    parser.add_argument("overrides", nargs="*", help="the run's overrides, e.g. experiment=qwen3_arithmetic")
    parser.add_argument("--device", choices=["cuda_bf16", "cuda", "cpu"], help="what the run trains on (default: here)")
    parser.add_argument("--processes", type=int, default=1, help="processes of the launch (one per GPU)")
    parser.add_argument("--zero-stage", type=int, choices=[0, 1, 2, 3], help="DeepSpeed ZeRO's stage (default: none)")
    parser.add_argument("--mixed-precision", choices=["no", "bf16", "fp16"], help="the accelerate profile's")
    args = parser.parse_args(argv)
    if args.processes < 1:
        parser.error(f"--processes {args.processes}: must be >= 1")

    def plan() -> int:
        components = build_components(compose(*args.overrides))
        print(plan_memory(components, args.processes, args.zero_stage, args.mixed_precision, args.device).table())
        return 0

    return int(or_exit_code(plan))


if __name__ == "__main__":
    raise SystemExit(main())
