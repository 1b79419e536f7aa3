"""``python -m socratic_exp.report``: the study's report on run and sweep folders (``socratic_exp.study.report``)."""

from socratic_exp.study.report import main

if __name__ == "__main__":
    raise SystemExit(main())
