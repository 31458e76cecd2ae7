"""Planning the matrix: which presets, which cells (presets x temperatures x concurrency), and
the request each cell sends. Pure: no I/O beyond reading the presets folder.
"""

from __future__ import annotations

from pathlib import Path

from demo.presets import Preset, load_presets
from demo.results import RaceRequest
from demo.sweep.models import CellSettings, SweepSpec


class UnknownPresetError(ValueError):
    """A preset name that is not in the presets folder."""


def resolve_presets(names: list[str], presets_dir: Path) -> dict[str, Preset]:
    """The named presets; raises UnknownPresetError naming the known ones."""
    presets, _errors = load_presets(presets_dir)
    unknown = [n for n in names if n not in presets]
    if unknown:
        known = ", ".join(sorted(presets)) or "none found in " + str(presets_dir)
        raise UnknownPresetError(f"unknown preset {', '.join(map(repr, unknown))}; known presets: {known}")
    return {n: presets[n] for n in names}


def plan_cells(spec: SweepSpec, presets: dict[str, Preset]) -> list[CellSettings]:
    cells = []
    for name in spec.presets:
        p = presets[name]
        for t in spec.temperatures if spec.temperatures is not None else [p.temperature]:
            for c in spec.concurrency:
                cells.append(CellSettings(
                    preset=name, temperature=t, concurrency=c, max_tokens=spec.max_tokens or p.max_tokens,
                    api=p.api, repeats=spec.repeats, warmup=spec.warmup, order=spec.order,
                    baseline_url=spec.baseline_url, speculative_url=spec.speculative_url))
    return cells


def cell_label(c: CellSettings) -> str:
    return f"{c.preset} T={c.temperature:g} c={c.concurrency}"


def cell_request(cell: CellSettings, preset: Preset) -> RaceRequest:
    return RaceRequest(preset=preset.name, messages=preset.messages, api=cell.api,
                       temperature=cell.temperature, max_tokens=cell.max_tokens, order="sequential")
