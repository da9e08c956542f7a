"""The glucose trainer's command line (also the image's ENTRYPOINT): make or prepare a
dataset, train, evaluate, measure. `python -m trainer COMMAND -h` lists a command's
flags, each with its default.

Exit codes: 0 done, 2 user error and 74 run dir not writable (one line on stderr each),
75 stopped or preempted with a checkpoint written (restart me; for `sync`: storage
still down, try again), or another process uploads the run dir (one line; try again
once it has ended).

Each subcommand's flags are its config's fields (`trainer.commands`, `trainer.flags`);
the exit codes are `box.contract`'s EXIT_*, and `trainer.exit_codes` says which error
gets which.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import textwrap
from pathlib import Path
from typing import Any, NoReturn

from box.contract import EXIT_FINISHED, EXIT_STOPPED, EXIT_UNWRITABLE, EXIT_USER_ERROR
from trainer.checkpoints.run_log import keep_run_log
from trainer.checkpoints.uploader_lock import UploaderBusy
from trainer.commands import COMMANDS
from trainer.config import SynthConfig, UserError, run_config_from_flags
from trainer.container_env import host_path, load_env_file
from trainer.data.vitaldb.config import PrepareConfig
from trainer.exit_codes import exit_code_for, exit_message
from trainer.flags import add_flags, from_flags


class _OneLineParser(argparse.ArgumentParser):
    """argparse whose mistakes are one line naming the flag and the fix, not ~20 lines of
    usage; exit 2, as every user error (its subcommands' parsers are of this class too)."""

    def error(self, message: str) -> NoReturn:
        print(
            f"error: {self.prog}: {message}; `{self.prog} --help` lists what it takes",
            file=sys.stderr,
        )
        sys.exit(EXIT_USER_ERROR)


class _WholeWords(argparse.HelpFormatter):
    """argparse's wrapping, never inside a word: textwrap breaks at hyphens by default,
    which cut `bench-checkpoint` and `--decay-norms-and-biases` in two."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(
            " ".join(text.split()), width, break_on_hyphens=False, break_long_words=False
        )

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines = self._split_lines(text, width - len(indent))
        return "\n".join(indent + line for line in lines)


def _parser() -> argparse.ArgumentParser:
    """Every subcommand, its flags its config's fields (trainer.commands)."""
    description, epilog = __doc__.split("\n\n")[:2]
    parser = _OneLineParser(
        prog="python -m trainer",
        description=description,
        epilog=epilog,
        formatter_class=_WholeWords,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        subparser = commands.add_parser(
            name, help=command.help, description=command.help, formatter_class=_WholeWords
        )
        add_flags(subparser, *command.configs)
    return parser


def _config(args: argparse.Namespace) -> Any:
    """The command's config from its parsed flags (validated: a UserError names the flag)."""
    if args.command == "train":
        return run_config_from_flags(args)
    (config,) = COMMANDS[args.command].configs
    return from_flags(config, args)


def _dispatch(args: argparse.Namespace) -> int:
    # Heavy modules (torch) load per command: `--help` and flag errors stay instant.
    command, config = args.command, _config(args)
    if command == "synth":
        return _synth(config)
    if command == "train":
        from trainer.loop.train import train

        return train(config)
    if command == "launch":
        return _launch(config.torchrun_args)
    if command == "sweep":
        from trainer.sweep.driver import run_sweep

        return run_sweep(config.dir)
    if command == "evaluate":
        from trainer.loop.evaluate import evaluate_checkpoint

        metrics = evaluate_checkpoint(
            config.data, config.checkpoint, config.split, other_data=config.allow_other_data
        )
        print(json.dumps(metrics, indent=2))
        return EXIT_FINISHED
    if command == "sync":
        from trainer.checkpoints.final_upload import sync_and_mark

        return sync_and_mark(config.run_dir, config.checkpoint_uri)
    if command == "prepare-vitaldb":
        return _prepare(config)
    if command in ("dataset-fetch", "dataset-publish"):
        from trainer.data import manifest

        if command == "dataset-fetch":
            print(manifest.fetch(config.uri, config.dest), flush=True)
        else:
            print(manifest.publish(config.dir, config.uri), flush=True)
        return EXIT_FINISHED
    return _bench(command, config)


def _synth(config: SynthConfig) -> int:
    from trainer.data.synth import synthesize

    out = synthesize(config)
    print(
        f"wrote {config.cases * config.windows_per_case} windows of "
        f"{config.window_length} samples ({config.cases} cases) to {out}"
    )
    return EXIT_FINISHED


def _prepare(config: PrepareConfig) -> int:
    from trainer.data.vitaldb.prepare import prepare_vitaldb

    outcome = prepare_vitaldb(config)
    verb = "holds" if outcome.already_done else "wrote"
    print(
        f"{host_path(config.out)} {verb} {outcome.windows} windows from {outcome.cases} cases "
        f"({outcome.skipped} skipped; see prepare_summary.json)"
    )
    return EXIT_FINISHED


def _bench(command: str, config: Any) -> int:
    """bench, bench-checkpoint, bench-prepare: each measures in its own module."""
    if command == "bench-prepare":
        from trainer.bench.prepare import run_bench_prepare

        return run_bench_prepare(
            config.cases, config.minutes, config.workers, json_output=config.json
        )
    if command == "bench-checkpoint":
        from trainer.bench.checkpoint import run_bench_checkpoint

        return run_bench_checkpoint(
            config.uri,
            every_seconds=config.every,
            round_seconds=config.round_seconds,
            rounds=config.rounds,
            repeats=config.repeats,
            upload_only=config.upload_only,
            batch_size=config.batch_size,
            json_output=config.json,
        )
    if config.noise_scale is not None:
        from trainer.bench.noise_scale import run_noise_scale

        return run_noise_scale(config.noise_scale, config.quick, config.batch_size, config.json)
    if config.time_to_quality:
        import torch

        from trainer.bench.time_to_quality import run_time_to_quality

        size = "tiny" if config.quick else "m2" if torch.cuda.is_available() else "small"
        return run_time_to_quality(
            size, config.target_mae, config.json, config.batch_size, config.nproc, config.seeds
        )
    from trainer.bench.train_step import run_bench

    return run_bench(
        json_output=config.json,
        record=config.record,
        quick=config.quick,
        batch_size=config.batch_size,
        graph=config.graph,
    )


def _launch(torchrun_args: list[str]) -> int:
    """torchrun over `train` (trainer.loop.launcher), its flags checked here first: a bad
    flag or a global batch smaller than the ranks is exit 2 before any rank starts."""
    from trainer.checkpoints.final_upload import finish_pending
    from trainer.loop.launcher import launch, parse_torchrun, world_size

    torchrun = parse_torchrun(torchrun_args[1:] if torchrun_args[:1] == ["--"] else torchrun_args)
    train_args = _parser().parse_args(torchrun.training_script_args)
    ranks = world_size(torchrun)
    if ranks is not None:
        run_config_from_flags(train_args).with_world_size(ranks)
    # A run that finished with uploads pending (box 0's status says so): upload here,
    # alone. Its ranks would wait in the rendezvous for boxes that finished and stay down.
    pending = finish_pending(Path(train_args.run_dir), train_args.checkpoint_uri)
    if pending is not None:
        return pending
    return launch(torchrun, train_args.run_dir)


def _configure_logging() -> None:
    """Storage sync, resume and spot notices log; the SDKs' INFO chatter stays out, and
    matplotlib's ("generated new fontManager" where its font cache is new)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    for noisy in ("botocore", "boto3", "s3transfer", "urllib3", "azure", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "train":  # what it prints outlives its container (run_log)
        keep_run_log(args.run_dir)
    elif args.command == "sweep":  # the driver's, in its folder: mirrored with it
        keep_run_log(args.dir)
    _configure_logging()
    code = _run(args)
    if args.command == "train":
        from trainer.loop.launcher import release_agent

        release_agent(code)  # under torchrun: a stop or a user error ends it, no restart
    return code


def _run(args: argparse.Namespace) -> int:
    try:
        load_env_file()
        return _dispatch(args)
    except UserError as error:
        print(exit_message(error), file=sys.stderr)
        return EXIT_USER_ERROR
    except UploaderBusy as error:  # before anything was written: try again later
        print(f"error: {error}", file=sys.stderr)
        return EXIT_STOPPED
    except OSError as error:  # a full disk, a read-only run dir: one line, exit 74
        if exit_code_for(error) != EXIT_UNWRITABLE:
            raise
        print(exit_message(error), file=sys.stderr)
        return EXIT_UNWRITABLE


if __name__ == "__main__":
    from trainer.loop.launcher import exit_process

    exit_process(main())
