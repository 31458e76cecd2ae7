"""load.png: the load sweep's slide through Plotly's exporter (kaleido) on the machine's Chromium,
and what happens without a browser (a one-line note; load.json and load.html still written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from demo.load.engine import LoadResult, LoadSpec
from demo.load.figures import SLIDE_HEIGHT_PX, SLIDE_WIDTH_PX, slide_figure
from demo.load.page import write_files
from demo.load.png import PngUnavailable, figure_png, png_size
from harness.chromium import CHROMIUM


def a_result() -> LoadResult:
    spec = LoadSpec(users=[1, 2], workload="json_reformat", max_tokens=60, temperature=0,
                    baseline_url="http://127.0.0.1:9", speculative_url="http://127.0.0.1:9")
    return LoadResult(spec=spec)


def test_png_size_reads_the_header_and_refuses_what_is_not_a_png() -> None:
    header = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + (640).to_bytes(4, "big") + (360).to_bytes(4, "big")
    assert png_size(header + b"rest") == (640, 360)
    with pytest.raises(ValueError):
        png_size(b"<html>")


def test_the_slide_is_a_png_of_its_size(tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.skip("load.png needs Debian's Chromium at /usr/bin/chromium: bash scripts/install_browser.sh")
    written = write_files(a_result(), tmp_path)
    assert written.png_note is None, written.png_note
    assert [p.name for p in written.paths] == ["load.json", "load.html", "load.png"]
    assert png_size((tmp_path / "load.png").read_bytes()) == (SLIDE_WIDTH_PX, SLIDE_HEIGHT_PX)
    assert not list(tmp_path.glob("*.tmp"))
    # another size is honoured (the exporter's scale stays 1)
    assert png_size(figure_png(slide_figure(a_result()), 800, 450)) == (800, 450)


def test_without_a_browser_the_png_is_a_note_and_the_rest_is_written(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-chrome"))
    with pytest.raises(PngUnavailable) as e:
        figure_png(slide_figure(a_result()), 800, 450)
    assert str(e.value).startswith("no PNG: ") and "\n" not in str(e.value)
    written = write_files(a_result(), tmp_path / "out")
    assert written.png_note is not None and written.png_note.startswith("no PNG: ")
    assert [p.name for p in written.paths] == ["load.json", "load.html"]
    assert not (tmp_path / "out" / "load.png").exists()


def test_the_slide_is_16_by_9_and_titled_with_the_workload() -> None:
    fig = slide_figure(a_result())
    assert fig.layout.title.text == "json_reformat: No step measured yet"
    assert (fig.layout.width, fig.layout.height) == (SLIDE_WIDTH_PX, SLIDE_HEIGHT_PX)
    assert fig.layout.xaxis.domain[1] < fig.layout.xaxis2.domain[0]  # side by side
