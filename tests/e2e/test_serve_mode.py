"""Mode serve: ``trinity run`` serves the engines' OpenAI API, loads published weights, stops on Ctrl-C.

The job runs as a user runs it (a subprocess with its own local Ray
cluster); an ``openai`` client talks to the URL it prints; a ``train`` job's
checkpoint-sync publication is played by writing weights the way that job
writes them (``save_weights`` into ``<run>/sync_weights``).
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml

from tests.faults.operator_view import finish, start
from trinity.common.models.tiny import build_tiny_model

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="trs-", dir="/tmp"))  # Ray's socket paths must stay short
    yield path
    shutil.rmtree(path, ignore_errors=True)


def health(url: str) -> dict:
    with urllib.request.urlopen(url.removesuffix("/v1") + "/health", timeout=10) as response:
        return json.loads(response.read())


def test_serve_prints_its_urls_answers_openai_clients_loads_published_weights_and_stops_on_ctrl_c(
        tmp_path: Path, ray_tmp: Path) -> None:
    import openai

    from trinity.synchronizer.checkpoint_sync import save_weights

    model = build_tiny_model(tmp_path / "tiny")
    raw = yaml.safe_load((REPO / "examples/agents/react/react.yaml").read_text())
    raw.update({"mode": "serve", "checkpoint_root_dir": str(tmp_path / "ckpt"), "name": "served"})
    raw["model"]["model_path"] = str(model)
    raw["explorer"]["service_status_check_interval"] = 1
    raw["explorer"]["rollout_model"]["api_host"] = "127.0.0.1"
    raw["monitor"] = {"progress": False, "plot": False, "monitor_type": "none"}
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump(raw))
    run_dir = tmp_path / "ckpt" / "agents" / "served"
    log = tmp_path / "serve.log"
    process = start(config, log, ray_tmp=ray_tmp)
    try:
        deadline = time.monotonic() + 180
        while not (run_dir / "serve.json").is_file():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        (endpoint,) = json.loads((run_dir / "serve.json").read_text())["endpoints"]
        assert endpoint["model"] == "rollout" and endpoint["model_names"] == [str(model), "rollout"]
        client = openai.OpenAI(base_url=endpoint["url"], api_key="EMPTY", max_retries=0)
        reply = client.chat.completions.create(model="rollout", messages=[{"role": "user", "content": "hi"}],
                                               max_tokens=4, temperature=0)
        assert reply.choices[0].model_extra["model_version"] == 0
        from transformers import AutoModelForCausalLM

        state = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).state_dict()
        save_weights({k: v + 0.01 for k, v in state.items()}, run_dir / "sync_weights", version=3)
        deadline = time.monotonic() + 60
        while health(endpoint["url"])["model_version"] != 3:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        reply = client.chat.completions.create(model="rollout", messages=[{"role": "user", "content": "hi"}],
                                               max_tokens=4, temperature=0)
        assert reply.choices[0].model_extra["model_version"] == 3
        served = {(m.model_extra["model_version"], m.model_extra["weights"]) for m in client.models.list().data}
        assert served == {(3, f"the weights a train job published at step 3 ({run_dir / 'sync_weights'})")}
    except BaseException:
        process.kill()
        raise
    process.send_signal(signal.SIGINT)
    code, output = finish(process, log, timeout=120)
    assert code == 0, output[-3000:]
    assert (f"serving rollout engine 0: {endpoint['url']} (models: {model}, rollout; weights: the model folder "
            f"{model} (no checkpoint yet), version 0)") in output
    published = run_dir / "sync_weights"
    assert f"serving from now on: the weights a train job published at step 3 ({published}), weights version 3" in (
        output)
    assert "Traceback" not in output
    assert not (run_dir / "serve.json").exists()
    port = int(endpoint["url"].removesuffix("/v1").rsplit(":", 1)[1])
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
