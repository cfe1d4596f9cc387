"""Write docs/config_reference.md from the config schema (run after changing the schema or the veRL key table)."""

from __future__ import annotations

from pathlib import Path

from trinity.common.config.reference import render_reference

TARGET = Path(__file__).resolve().parents[1] / "docs" / "config_reference.md"

if __name__ == "__main__":
    TARGET.write_text(render_reference(), encoding="utf-8")
    print(f"wrote {TARGET}")
