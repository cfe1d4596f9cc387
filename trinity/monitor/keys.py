"""Names shared by everything that logs or reads metrics: phases, metric keys, files in the run folder.

Producers (explorer, trainer, synchronizer) log with these keys so that the
console display and the reward plot find them; any other key is logged too,
just not singled out.
"""

from __future__ import annotations

#: Phase of trainer updates.
PHASE_TRAIN = "train"
#: Phase of rollout generation (the explorer).
PHASE_EXPLORE = "explore"
#: Phase of evaluations on held-out task sets.
PHASE_EVAL = "eval"
#: Phases whose reward makes the training curve, in order of preference.
TRAIN_PHASES: tuple[str, ...] = (PHASE_TRAIN, PHASE_EXPLORE)

#: Mean reward of the step's rollouts (or of an evaluation). An evaluation of a named
#: task set may prefix it: ``"gsm8k/reward/mean"``.
REWARD_MEAN = "reward/mean"
#: Generated (or trained) tokens per second.
TOKENS_PER_SECOND = "perf/tokens_per_s"
#: Seconds the last weight synchronisation took.
SYNC_SECONDS = "time/sync_s"
#: Seconds a weight sync waited for the rollout batch in flight to finish (mode both, concurrent loop).
SYNC_WAIT_SECONDS = "time/sync_wait_s"

# Where a training step's wall time went (mode both; see trinity.monitor.step_clock). Per train record:
# explore + train + save + sync + eval + driver == step.
#: Wall time of the training step: from the end of the previous step (or the loop's start) to the end of this one.
STEP_SECONDS = "time/step_s"
#: Seconds of the step in which a rollout batch ran while the trainer neither trained, saved, synced nor evaluated.
EXPLORE_SECONDS = "time/explore_s"
#: Seconds of the step the trainer spent on its update (padding, forward, backward, optimizer step).
TRAIN_SECONDS = "time/train_s"
#: Seconds of the step spent saving a checkpoint (only in steps that saved one).
SAVE_SECONDS = "time/save_s"
#: Seconds of the step spent evaluating (only in steps during which an evaluation ran).
EVAL_SECONDS = "time/eval_s"
#: The rest of the step: hand-offs, buffer reads and writes, logging, checkpoint bookkeeping on the driver.
DRIVER_SECONDS = "time/driver_s"
#: All seconds of the step in which a rollout batch ran, overlapped by the trainer's work or not.
ROLLOUT_SECONDS = "time/rollout_s"
#: Seconds the slowest trainer rank spent in its update (inside ``time/train_s``: the rest is the driver's batch
#: preparation and the calls to the ranks).
RANK_UPDATE_SECONDS = "time/rank_update_s"
#: Seconds the trainer waited for the step's batch to be explored and stored.
EXPLORE_WAIT_SECONDS = "time/explore_wait_s"

#: Metrics as JSON lines, in the run folder.
METRICS_FILE = "metrics.jsonl"
#: TensorBoard event files, a folder in the run folder.
TENSORBOARD_DIR = "tensorboard"
#: The reward curve written at the end of a run, in the run folder.
REWARD_PLOT_FILE = "reward_curve.png"
