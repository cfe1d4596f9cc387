"""The decode benchmark runs on the quickstart's model and finds both loops drawing the same tokens."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "bench_decode.py"


def test_one_round_on_the_quickstart_model(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_decode", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    out = tmp_path / "decode.json"
    assert module.main(["--models", "quickstart", "--rounds", "1", "--out", str(out)]) == 0
    import json

    result = json.loads(out.read_text())["models"]["quickstart"]
    assert result["same_tokens"] is True
    assert result["rows"] == 128 and result["distinct_prompts"] == 8
    assert result["median_s"]["decode"] > 0 and result["median_s"]["generate"] > 0
