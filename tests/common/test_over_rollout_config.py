"""Over-rollout needs a dynamic sync style: with ``sync_style: fixed`` the config is refused at load, as upstream."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.plans import BASE, make_plan
from trinity.common.config import ConfigError
from trinity.errors import EXIT_USAGE

REFUSED = (r"explorer\.over_rollout\.ratio: 0\.5 needs a dynamic sync, but synchronizer\.sync_style is fixed; "
           r"set synchronizer\.sync_style to explorer_driven or trainer_driven, or set the ratio to 0")


@pytest.mark.parametrize("style", [None, "fixed", " Fixed "])
def test_over_rollout_with_the_fixed_sync_style_is_refused(style: str | None) -> None:
    overrides: dict[str, object] = {"explorer.over_rollout.ratio": 0.5}
    if style is not None:
        overrides["synchronizer.sync_style"] = style
    with pytest.raises(ConfigError, match=REFUSED):
        make_plan(overrides)


@pytest.mark.parametrize("style", ["explorer_driven", "trainer_driven", "dynamic_by_explorer", "dynamic_by_trainer"])
def test_over_rollout_with_a_dynamic_sync_style_is_planned(style: str) -> None:
    plan = make_plan({"explorer.over_rollout.ratio": 0.5, "synchronizer.sync_style": style})
    assert plan.explorer.over_rollout_ratio == 0.5


def test_the_fixed_sync_style_without_over_rollout_is_fine() -> None:
    plan = make_plan({"explorer.over_rollout.ratio": 0.0, "synchronizer.sync_style": "fixed"})
    assert plan.explorer.over_rollout_ratio == 0.0 and plan.sync.style == "fixed"


def test_the_command_line_refuses_it_in_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trinity.cli.main import main

    path = tmp_path / "over.yaml"
    config = {**BASE, "explorer": {**BASE["explorer"], "over_rollout": {"ratio": 0.5}}}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    assert main(["run", "--config", str(path), "--dry-run"]) == EXIT_USAGE
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"trinity: error: {path}: explorer.over_rollout.ratio: 0.5 needs a dynamic sync")
