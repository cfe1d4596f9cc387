"""Mode colocate's handover on the CPU: a memory-mapped file the trainer rank writes and the engine reads.

Real: the file in /dev/shm, a second process mapping it, ``flock``, the hf
engine on the tiny model, the FSDP2 trainer rank (one rank, in this process)
and the synchronizer's ``shared`` method.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.support import make_trainer_plan
from trinity.common.constants import SyncMethod
from trinity.common.models.checksum import state_dict_checksum
from trinity.common.models.hf_engine import HFEngine
from trinity.synchronizer.synchronizer import Synchronizer
from trinity.weight_transport.protocol import WeightSyncError
from trinity.weight_transport.shared_file import SharedWeights, layout


@pytest.fixture
def state(tiny_path: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_path), dtype=torch.float32)
    return {k: v.detach().clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}


@pytest.fixture
def shm(tmp_path: Path) -> Path:
    return Path("/dev/shm") / f"trinity-test-{tmp_path.name}"


def shifted(state: dict[str, torch.Tensor], by: float) -> dict[str, torch.Tensor]:
    return {k: v + by if v.is_floating_point() else v for k, v in state.items()}


def test_a_second_process_reads_what_the_trainer_wrote(state: dict[str, torch.Tensor], shm: Path) -> None:
    written = SharedWeights.create(shm, state)
    try:
        assert written.version() == -1 and shm.stat().st_size == layout(written.metas)[1]
        written.write(shifted(state, 0.5), 3)
        metas = [[m.name, m.dtype, list(m.shape)] for m in written.metas]
        code = (
            "import json, sys\n"
            "from trinity.weight_transport.protocol import TensorMeta\n"
            "from trinity.weight_transport.shared_file import SharedWeights\n"
            "metas = [TensorMeta(n, d, tuple(s)) for n, d, s in json.loads(sys.argv[2])]\n"
            "shared = SharedWeights.attach(sys.argv[1], metas)\n"
            "with shared.reading() as version:\n"
            "    print(json.dumps([version, {k: float(v.double().sum()) for k, v in shared.tensors.items()}]))\n"
        )
        done = subprocess.run([sys.executable, "-c", code, str(shm), json.dumps(metas)], capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        version, sums = json.loads(done.stdout)
        assert version == 3
        for name, value in shifted(state, 0.5).items():
            assert sums[name] == pytest.approx(float(value.double().sum()), rel=1e-6)
    finally:
        written.close(unlink=True)
    assert not shm.exists()


def test_a_write_waits_until_no_forward_reads_the_weights(state: dict[str, torch.Tensor], shm: Path) -> None:
    written = SharedWeights.create(shm, state)
    reader = SharedWeights.attach(shm, written.metas)  # its own descriptor: its own lock, as in the engine
    try:
        written.write(state, 1)
        writer = threading.Thread(target=written.write, args=(shifted(state, 1.0), 2))
        with reader.reading() as version:
            writer.start()
            time.sleep(0.3)
            assert version == 1 and reader.version() == 1, "a version was written under a reader"
            assert writer.is_alive()
        writer.join(10)
        assert not writer.is_alive() and reader.version() == 2
    finally:
        reader.close()
        written.close(unlink=True)


def test_attaching_a_file_of_another_shape_is_refused(state: dict[str, torch.Tensor], shm: Path) -> None:
    written = SharedWeights.create(shm, state)
    try:
        fewer = written.metas[:-1]
        with pytest.raises(WeightSyncError, match="has another size than the"):
            SharedWeights.attach(shm, fewer)
    finally:
        written.close(unlink=True)
    with pytest.raises(WeightSyncError, match="is missing"):
        SharedWeights.attach(shm, written.metas)


def engine(tiny_path: Path, dtype: str = "float32") -> HFEngine:
    return HFEngine(str(tiny_path), dtype=dtype, torch_threads=1, max_prompt_tokens=32)


def test_the_engine_serves_each_written_version_without_a_copy_or_a_call(
    tiny_path: Path, state: dict[str, torch.Tensor], shm: Path
) -> None:
    written = SharedWeights.create(shm, state)
    served = engine(tiny_path)
    try:
        written.write(shifted(state, 0.25), 4)
        served.attach_shared_weights(str(shm), written.metas)
        assert served.model_version() == 4
        own = served.model.state_dict()
        assert served.state_dict_checksum() == state_dict_checksum({**shifted(state, 0.25),
                                                                    "lm_head.weight": own["lm_head.weight"]})
        written.write(shifted(state, -0.25), 5)  # nothing tells the engine: it reads the file's version
        for name, value in shifted(state, -0.25).items():  # read without taking the model: the file's own tensors
            assert torch.equal(served.model.state_dict()[name], value), f"{name} is a copy, not the file's tensor"
        assert served.model_version() == 5
        completion = served.generate_tokens([[1, 2, 3]], served_params())[0][0]
        assert completion.model_version == 5
    finally:
        served.shutdown()
        written.close(unlink=True)


def served_params() -> Any:
    from trinity.common.models.engine import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=2)


def test_an_engine_of_another_dtype_copies_each_new_version(
    tiny_path: Path, state: dict[str, torch.Tensor], shm: Path
) -> None:
    written = SharedWeights.create(shm, state)
    served = engine(tiny_path, dtype="bfloat16")
    try:
        written.write(shifted(state, 0.5), 6)
        served.attach_shared_weights(str(shm), written.metas)
        assert served.model_version() == 6
        norm = served.model.state_dict()["model.norm.weight"]
        assert norm.dtype == torch.bfloat16 and norm.data_ptr() != written.tensors["model.norm.weight"].data_ptr()
        assert torch.equal(norm, shifted(state, 0.5)["model.norm.weight"].to(torch.bfloat16))
    finally:
        served.shutdown()
        written.close(unlink=True)


def test_the_synchronizer_hands_the_trainer_ranks_weights_to_the_engine(tiny_path: Path, tmp_path: Path,
                                                                        shm: Path) -> None:
    from trinity.trainer.trainer import FSDPTrainer

    plan = make_trainer_plan(tiny_path, tmp_path, world_size=1)
    trainer = FSDPTrainer(plan, world_size=1, in_process=True)
    served = engine(tiny_path)
    sync = Synchronizer(SyncMethod("shared"), trainer, [served], plan.sync, shared_path=shm)
    try:
        rank = trainer.workers[0]
        with torch.no_grad():
            for parameter in rank.actor.parameters():
                parameter.add_(0.125)  # as an optimizer step would, in place
        report = sync.sync(1)
        assert report.method == "shared" and report.bytes == shm.stat().st_size
        assert served.model_version() == 1
        assert served.state_dict_checksum() == rank.state_dict_checksum()
        with torch.no_grad():
            for parameter in rank.actor.parameters():
                parameter.mul_(0.5)
        again = sync.sync(2)  # one write; the engine mapped the file at the first sync
        assert again.version == 2 and served.model_version() == 2
        assert served.state_dict_checksum() == rank.state_dict_checksum()
        fresh = engine(tiny_path)
        sync.replace_engine(0, fresh)  # a replaced engine maps the file at the next sync
        sync.sync(3)
        assert fresh.model_version() == 3 and fresh.state_dict_checksum() == rank.state_dict_checksum()
        fresh.shutdown()
    finally:
        sync.close()
        served.shutdown()
        trainer.shutdown()
    assert not shm.exists(), "closing the synchronizer removes the shared file"


def test_a_step_that_writes_the_weights_leaves_the_sync_no_call_to_make(
    ray_local: Any, tiny_path: Path, tmp_path: Path, shm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.trainer.support import make_experiences
    from trinity.trainer.trainer import FSDPTrainer

    plan = make_trainer_plan(tiny_path, tmp_path, world_size=1, **{"algorithm.optimizer.lr": 1e-2})
    trainer = FSDPTrainer(plan, world_size=1, in_process=True)
    served = engine(tiny_path)
    sync = Synchronizer(SyncMethod("shared"), trainer, [served], plan.sync, shared_path=shm)
    try:
        rank = trainer.workers[0]
        before = rank.state_dict_checksum()
        target = sync.publish_target(1)
        assert target == (str(shm), 1)
        trainer.train_step(make_experiences(groups=2, group_size=3, seed=4), publish=target)
        assert trainer.last_publication is not None
        path, _, nbytes, seconds = trainer.last_publication
        assert path == str(shm) and nbytes == shm.stat().st_size and seconds > 0
        sync.note_published(1, trainer.last_publication)

        def no_call(*args: Any) -> None:
            raise AssertionError("the sync called the trainer rank")

        with monkeypatch.context() as patched:
            patched.setattr(rank, "publish_shared_weights", no_call)
            report = sync.sync(1)
        assert report.written_in_step and report.seconds >= seconds and report.bytes == nbytes
        assert served.model_version() == 1
        assert served.state_dict_checksum() == rank.state_dict_checksum() != before
        # a sync of a version the step did not write asks the rank, as before
        trainer.train_step(make_experiences(groups=2, group_size=3, seed=5))
        report = sync.sync(2)
        assert not report.written_in_step and served.model_version() == 2
        assert served.state_dict_checksum() == rank.state_dict_checksum()
    finally:
        sync.close()
        served.shutdown()
        trainer.shutdown()


def test_only_the_shared_method_takes_weights_within_the_step(tiny_path: Path, tmp_path: Path) -> None:
    plan = make_trainer_plan(tiny_path, tmp_path, world_size=1)
    online = Synchronizer(SyncMethod("collective"), [object()], [], plan.sync)
    assert online.publish_target(1) is None
    two_ranks = Synchronizer(SyncMethod("shared"), [object(), object()], [], plan.sync, shared_path=tmp_path / "w")
    assert two_ranks.publish_target(1) is None


def test_a_full_dev_shm_sends_the_file_to_the_temporary_folder_or_stops_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container's 64 MB /dev/shm would kill the writer with SIGBUS: room is checked before the file is made.

    The free space a file system reports is replaced (no 64 MB tmpfs can be mounted here without privileges).
    """
    from trinity.weight_transport import shared_file

    wanted = Path("/dev/shm/trinity-weights-x")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(shared_file, "free_bytes", lambda folder: (64 << 20) if folder == wanted.parent else 1 << 40)
    assert shared_file.room_for(wanted, 8 << 20) == wanted
    assert shared_file.room_for(wanted, 200 << 20) == tmp_path / wanted.name
    monkeypatch.setattr(shared_file, "free_bytes", lambda folder: 1 << 20)
    with pytest.raises(WeightSyncError, match=r"no room for the 200 MB shared weights file of mode colocate: "
                                              r"/dev/shm has 1 MB free; .* has 1 MB free; enlarge /dev/shm"):
        shared_file.room_for(wanted, 200 << 20)
