"""A one-rank FSDP2 trainer's online syncs: after the first, the synchronizer sends the known plan in one call.

Real: the FSDP2 trainer rank (gloo, in this process), the weight-sync group,
an in-process engine double that loads what it receives.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainer.support import EngineDouble, make_trainer_plan
from trinity.common.constants import SyncMethod
from trinity.synchronizer.synchronizer import SyncError, Synchronizer


def test_the_rank_reads_and_sends_its_live_weights_in_one_call_and_refuses_a_changed_plan(
    tiny_path: Path, tmp_path: Path
) -> None:
    from trinity.trainer.trainer import FSDPTrainer

    plan = make_trainer_plan(tiny_path, tmp_path, world_size=1)
    trainer = FSDPTrainer(plan, world_size=1, in_process=True)
    engine = EngineDouble(str(tiny_path))
    sync = Synchronizer(SyncMethod.parse("online", "gloo"), trainer, [engine], plan.sync)
    rank = trainer.workers[0]
    sends: list[int] = []
    send = rank.send_weights
    rank.send_weights = lambda *a: (sends.append(1), send(*a))[1]
    try:
        assert sync.sync(1).gather_seconds > 0 and not sends  # the first sync asks for the plan
        for version in (2, 3):
            with torch.no_grad():
                for parameter in rank.actor.parameters():
                    parameter.mul_(0.75)  # as an optimizer step would, in place
            report = sync.sync(version)
            assert report.gather_seconds == 0.0
            assert engine.state_dict_checksum() == rank.state_dict_checksum() and engine.version == version
        assert len(sends) == 2

        rank.compute_dtype = torch.float64  # the export dtype changes: the plan of the first sync no longer holds
        with pytest.raises(SyncError, match=r"no longer match the plan of the first sync \(tensor 0: .* float32"
                                            r"|the sender broadcasts"):
            sync.sync(4)
        assert engine.version == 3
    finally:
        sync.close()
        trainer.shutdown()
