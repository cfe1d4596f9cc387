"""``trinity run --config X.yaml`` and ``trinity convert``: the RFT job and checkpoint export.

Heavy imports (torch, ray, transformers) happen inside the handlers. Errors a
user can fix (config, Ray connection, device choice, data files) become one
line and exit status 2 (bad input) or 1 (the run failed).
"""

from __future__ import annotations

import argparse
from typing import Any

from trinity.cli.errors import EXIT_USAGE, CLIError


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``run`` and ``convert`` to the top-level subparsers."""
    run = commands.add_parser(
        "run", parents=[common], help="run an RFT job described by a YAML config",
        description="Run a reinforcement fine-tuning job (mode both, explore, train, bench or serve) from a YAML "
        "config. Connects to the configured Ray cluster, or a running local one, or starts one.",
    )
    run.add_argument("-c", "--config", required=True, metavar="FILE", help="the job's YAML config")
    run.add_argument(
        "--dry-run", action="store_true",
        help="check the config and print the resolved plan (device backend, layout, sync, algorithm, data) "
        "without starting Ray or loading a model; exit 0 when it would run, 2 when not",
    )
    run.add_argument(
        "--device", default=None, metavar="NAME",
        help="with --dry-run: plan for this installed device backend (e.g. npu) instead of this machine's",
    )
    run.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a config value by dotted path (YAML value), e.g. --set trainer.save_interval=2",
    )
    run.add_argument(
        "--plugin-dir", dest="plugin_dirs", action="append", default=[], metavar="DIR",
        help="load every Python file of DIR before the config is read: your own workflows, rewards, algorithms "
        "and operators, registered by name (repeatable; TRINITY_PLUGIN_DIRS and trinity/plugins load too)",
    )
    run.set_defaults(handler=cmd_run)

    convert = commands.add_parser(
        "convert", parents=[common], help="export a trainer checkpoint as a Hugging Face model folder",
        description="Write the model of a trainer checkpoint (a step folder, or a run folder: its latest step) "
        "as a Hugging Face model folder that transformers loads.",
    )
    convert.add_argument("checkpoint", metavar="CHECKPOINT", help="a checkpoint step folder or a run folder")
    convert.add_argument("output", metavar="OUTPUT", help="the Hugging Face folder to write")
    convert.add_argument("--model-path", default=None, help="the run's original model folder, when the "
                         "checkpoint lacks its config/tokenizer copy (or, for a LoRA run, the base model is no "
                         "longer where the run found it)")
    convert.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                         help="dtype of the written weights (default: the run's model.dtype)")
    convert.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    convert.add_argument("--adapter", action="store_true", help="a LoRA run: write its adapters as a PEFT "
                         "adapter folder instead of the merged model")
    convert.set_defaults(handler=cmd_convert)


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """Turn ``KEY=VALUE`` strings into a dotted-path mapping (values parsed as YAML)."""
    import yaml

    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CLIError(f"--set {item!r}: expected KEY=VALUE, e.g. --set trainer.save_interval=2", EXIT_USAGE)
        overrides[key.strip()] = yaml.safe_load(value) if value else ""
    return overrides


def cmd_run(args: argparse.Namespace) -> int:
    """Load the config and run the job (or, with ``--dry-run``, print its plan); return the exit status."""
    if args.device and not args.dry_run:
        raise CLIError("--device plans for another backend and needs --dry-run; to run on a backend, set "
                       "cluster.device or TRINITY_DEVICE", EXIT_USAGE)
    from trinity.utils.plugins import load_plugins

    load_plugins(args.plugin_dirs)  # before the config is read: it names what the plugins register
    if args.dry_run:
        from trinity.cli.dry_run import dry_run

        return dry_run(args.config, parse_overrides(args.overrides), args.device)
    from trinity.launcher import run_job

    return run_job(args.config, parse_overrides(args.overrides))


def cmd_convert(args: argparse.Namespace) -> int:
    """Convert a checkpoint to a Hugging Face folder; return the exit status."""
    from trinity.manager.checkpoint_converter import convert_checkpoint

    out = convert_checkpoint(
        args.checkpoint, args.output, model_path=args.model_path, dtype=args.dtype, overwrite=args.overwrite,
        adapter=args.adapter,
    )
    print(f"wrote {out}")
    return 0
