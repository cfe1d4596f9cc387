"""Multi-stage runs (``stages:``): each stage is the config with the sections the stage gives replaced."""

from __future__ import annotations

import copy
import dataclasses

from trinity.common.config.schema import Config
from trinity.common.config.schema.fields import ConfigSource

#: Sections a stage may replace, whole.
STAGE_SECTIONS = ("mode", "algorithm", "buffer", "data_processor", "explorer", "trainer")


def stage_configs(config: Config) -> list[Config]:
    """Return one config per stage, in order: a copy of ``config`` with the stage's sections replaced.

    As upstream does, a stage runs in the folder ``<name>/<stage_name>`` and
    always exports its final weights as a Hugging Face model (the next stage
    starts from them). ``config`` itself is left as it is.
    """
    out = []
    for index, stage in enumerate(config.stages):
        staged = copy.deepcopy(config)
        staged.stages = []
        replaced = [name for name in STAGE_SECTIONS if getattr(stage, name) is not None]
        for name in replaced:
            setattr(staged, name, copy.deepcopy(getattr(stage, name)))
        if stage.stage_name:
            staged.name = f"{config.name}/{stage.stage_name}"
        staged.trainer.save_hf_checkpoint = "last"
        staged.source = _stage_source(config.source, index, replaced)
        out.append(staged)
    return out


def _stage_source(source: ConfigSource, index: int, replaced: list[str]) -> ConfigSource:
    """Return what a stage's config set: the base keys outside its replaced sections, and the stage's own."""
    prefix = f"stages[{index}]."
    kept = {k for k in source.explicit if k.split(".")[0] not in replaced and not k.startswith("stages[")}
    own = {k[len(prefix):] for k in source.explicit if k.startswith(prefix) and not k.endswith("stage_name")}
    inert = tuple((k[len(prefix):] if k.startswith(prefix) else k, why) for k, why in source.inert
                  if k.startswith(prefix) or (k.split(".")[0] not in replaced and not k.startswith("stages[")))
    return dataclasses.replace(source, explicit=frozenset(kept | own), inert=inert)


def stage_name(config: Config, index: int) -> str:
    """Return the display name of stage ``index`` (its ``stage_name``, else ``stage-<n>``)."""
    return config.stages[index].stage_name or f"stage-{index + 1}"
