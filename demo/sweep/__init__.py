"""The evaluator: a measured sweep, its verdict and its report (python -m demo sweep)."""
