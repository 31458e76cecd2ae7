"""Start, watch and stop the vLLM servers the demo races: ``python -m servers up|status|down|monitor``.

Stands alone: it imports nothing of demo/ (the layers' contracts in pyproject.toml).
"""
