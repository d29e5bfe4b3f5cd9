"""kvtrace benchmarks (not timed tests): ``python -m bench [NAME ...]`` or ``make bench``.

Each ``bench/bench_<name>.py`` has ``main() -> dict``; the runner writes its result to
``bench/results/<name>.json``. Generated inputs go to ``bench/data/`` (git-ignored, reused).
"""
