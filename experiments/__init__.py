"""Benchmarks (bench_*.py) and the fault-injection scenarios that regenerate the result tables
under experiments/results/ (scenario_*.py, all of them from run_experiments.py)."""
