"""demo/ui/app.py: launch settings (bind, share, login) and the exposure warning."""

from __future__ import annotations

import pytest

from demo.settings import Settings
from demo.ui.app import build_app, exposure_warning, launch_kwargs


def test_defaults_bind_localhost_without_share_or_login() -> None:
    kw = launch_kwargs(Settings())
    assert (kw["server_name"], kw["server_port"], kw["share"], kw["auth"]) == ("127.0.0.1", 7860, False, None)
    assert exposure_warning(Settings()) is None


def test_exposed_without_login_warns_and_login_is_parsed() -> None:
    exposed, shared = exposure_warning(Settings(ui_host="0.0.0.0")), exposure_warning(Settings(ui_share=True))
    assert exposed is not None and "WITHOUT a login" in exposed
    assert shared is not None and "public share link" in shared
    s = Settings(ui_host="0.0.0.0", ui_auth="demo:se:cret")
    assert exposure_warning(s) is None
    assert launch_kwargs(s)["auth"] == ("demo", "se:cret")
    with pytest.raises(ValueError, match="user:password"):
        launch_kwargs(Settings(ui_auth="nopassword"))


def test_build_app_has_the_race_tab(tmp_path) -> None:
    page = build_app(Settings(presets_dir=tmp_path))  # no presets: the page still builds
    ids = {getattr(b, "elem_id", None) for b in page.blocks.values()}
    assert {"sd-start", "sd-stop", "sd-speedup", "sd-text-baseline", "sd-text-speculative"} <= ids
