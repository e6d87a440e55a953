"""The benchmarks, one module each, run as `python -m experiments.benches.<name> [--quick]`:
every figure beside a baseline measured in the same run, tables on stdout, progress on stderr."""
