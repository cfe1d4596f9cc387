"""docs/config_reference.md is generated from the schema; it must match what the code accepts."""

from __future__ import annotations

from pathlib import Path

from trinity.common.config.reference import render_reference, schema_rows

DOC = Path(__file__).resolve().parents[2] / "docs" / "config_reference.md"


def test_reference_document_is_up_to_date() -> None:
    assert DOC.read_text(encoding="utf-8") == render_reference(), (
        "docs/config_reference.md is stale: run `python scripts/write_config_reference.py`"
    )


def test_reference_lists_upstream_keys_users_write() -> None:
    keys = {row.path for row in schema_rows()}
    for key in (
        "algorithm.algorithm_type",
        "algorithm.repeat_times",
        "buffer.explorer_input.taskset.path",
        "explorer.rollout_model.engine_num",
        "synchronizer.sync_interval",
        "trainer.save_interval",
    ):
        assert key in keys
