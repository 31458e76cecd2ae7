"""Saved runs: races (one user or N) and load sweeps written whole and read back checked (store),
a saved race's snapshots at its real timing (replay), one race as a self-contained page (export)."""
