"""`python -m trainer synth|train|launch|sweep|evaluate|sync|bench|bench-checkpoint|
prepare-vitaldb|bench-prepare|dataset-fetch|dataset-publish` (also the image's ENTRYPOINT).

Exit codes (ARCHITECTURE.md, `trainer.exit_codes`): 0 done, 2 user error and 74 run
dir not writable (one line on stderr each), 75 stopped or preempted with a
checkpoint written (restart me; for `sync`: storage still down, try again), or
another process uploads the run dir (one line; try again once it has ended).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import NoReturn

from trainer.checkpoints.run_log import keep_run_log
from trainer.checkpoints.uploader_lock import UploaderBusy
from trainer.config import SynthConfig, UserError, run_config_from_flags, train_flags
from trainer.container_env import load_env_file
from trainer.data.vitaldb.config import (
    DEFAULT_SOURCE_URL,
    LABEL_METHODS,
    MILESTONE_CASES,
    PrepareConfig,
)
from trainer.exit_codes import (
    EXIT_STOPPED,
    EXIT_UNWRITABLE,
    EXIT_USER_ERROR,
    exit_code_for,
    unwritable_message,
)
from trainer.quantities import count, duration_type

seconds = duration_type("s")


class _OneLineParser(argparse.ArgumentParser):
    """argparse whose mistakes are one line naming the flag and the fix, not ~20 lines of
    usage; exit 2, as every user error (its subcommands' parsers are of this class too)."""

    def error(self, message: str) -> NoReturn:
        print(
            f"error: {self.prog}: {message}; `{self.prog} --help` lists what it takes",
            file=sys.stderr,
        )
        sys.exit(EXIT_USER_ERROR)


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="python -m trainer", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    synth = commands.add_parser("synth", help="write a synthetic PPG dataset")
    synth.add_argument("--out", type=Path, required=True)
    synth.add_argument("--cases", type=count, required=True)
    synth.add_argument("--windows-per-case", type=count, required=True)
    synth.add_argument("--window-length", type=count, default=100)
    synth.add_argument("--seed", type=count, default=0)
    synth.add_argument("--force", action="store_true", help="replace a dataset already in --out")

    train_flags(commands.add_parser("train", help="train (resumes from the run dir by itself)"))

    sweep = commands.add_parser(
        "sweep", help="run (or resume) the sweep in DIR (its sweep.json; see `fab sweep`)"
    )
    sweep.add_argument("--dir", type=Path, required=True, help="the sweep's folder")

    launch = commands.add_parser(
        "launch",
        help="torchrun over `train`, exiting with the run's exit code: launch -- TORCHRUN_ARGS",
    )
    launch.add_argument("torchrun_args", nargs=argparse.REMAINDER, metavar="-- TORCHRUN_ARGS")

    evaluate = commands.add_parser("evaluate", help="print JSON metrics of a checkpoint")
    evaluate.add_argument("--data", type=Path, required=True)
    evaluate.add_argument("--checkpoint", required=True, metavar="PATH_OR_URI")
    evaluate.add_argument("--split", default="test", choices=("train", "val", "test"))
    evaluate.add_argument(
        "--allow-other-data",
        action="store_true",
        help="score the checkpoint on a dataset it was not trained on (its split's case ids)",
    )

    _add_storage_commands(commands)
    _add_bench_commands(commands)
    _add_prepare_commands(commands)
    return parser


def _add_storage_commands(commands) -> None:
    """sync, dataset-fetch, dataset-publish: a run's or a dataset's files and storage."""
    sync = commands.add_parser(
        "sync", help="upload what a run dir's store lacks (a finished run's pending uploads)"
    )
    sync.add_argument("--run-dir", type=Path, required=True)
    sync.add_argument("--checkpoint-uri", required=True)

    fetch = commands.add_parser(
        "dataset-fetch", help="cache a dataset from storage, every file checked (its manifest)"
    )
    fetch.add_argument("uri", help="the dataset's folder in storage: <storageUri>/datasets/NAME")
    fetch.add_argument("dest", type=Path, help="local directory (kept: a second fetch is free)")
    publish = commands.add_parser(
        "dataset-publish", help="upload a dataset directory to storage, its manifest last"
    )
    publish.add_argument("dir", type=Path, help="the dataset directory")
    publish.add_argument("uri", help="where: <storageUri>/datasets/NAME")


def _add_bench_commands(commands) -> None:
    """bench, bench-checkpoint: what the trainer and its checkpoints cost in time."""
    bench = commands.add_parser("bench", help="windows/s of pipeline and train step vs baseline")
    bench.add_argument("--json", action="store_true", help="print one JSON object")
    bench.add_argument(
        "--record",
        type=Path,
        default=None,
        metavar="CSV",
        help="append a row to a measured-throughput CSV",
    )
    bench.add_argument("--quick", action="store_true", help="a few seconds, for tests")
    bench.add_argument(
        "--batch-size",
        type=count,
        default=None,
        help="the step's batch (default: what train takes for M2-sized data); with "
        "--time-to-quality, the run's global batch",
    )
    bench.add_argument(
        "--no-graph",
        action="store_true",
        help="on a GPU, time the eager step (a run's fallback: --no-graph, --compile, "
        "--grad-accum, a failed capture) instead of the captured one",
    )
    bench.add_argument(
        "--time-to-quality",
        action="store_true",
        help="seconds from start to today's default's val MAE, training with the defaults on "
        "fixed synthetic data (M2-sized on a GPU, tiny on a CPU or with --quick)",
    )
    bench.add_argument(
        "--target-mae", type=float, default=None, help="--time-to-quality's target (mg/dL)"
    )
    bench.add_argument(
        "--nproc",
        type=count,
        default=None,
        metavar="N",
        help="--time-to-quality under torchrun with N ranks (GPUs; gloo processes on a CPU)",
    )

    bench_checkpoint = commands.add_parser(
        "bench-checkpoint",
        help="seconds to save + upload a checkpoint, throughput with vs without checkpoints",
    )
    bench_checkpoint.add_argument("--uri", required=True, help="file://, s3:// or az:// URI")
    bench_checkpoint.add_argument("--every", type=seconds, default=30.0, metavar="SECONDS")
    bench_checkpoint.add_argument("--round-seconds", type=seconds, default=30.0)
    bench_checkpoint.add_argument("--rounds", type=count, default=10)
    bench_checkpoint.add_argument("--repeats", type=count, default=3)
    bench_checkpoint.add_argument("--upload-only", action="store_true")
    bench_checkpoint.add_argument("--batch-size", type=count, default=None)
    bench_checkpoint.add_argument("--json", action="store_true", help="print one JSON object")


def _case_ids(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected case ids separated by commas, e.g. 1,5,9"
        ) from None


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _add_prepare_commands(commands) -> None:
    prepare = commands.add_parser(
        "prepare-vitaldb", help="VitalDB cases -> a dataset dir (resumable: run it again)"
    )
    prepare.add_argument("--out", type=Path, required=True)
    source = prepare.add_mutually_exclusive_group(required=True)
    source.add_argument("--vital-dir", type=Path, help="a folder of <caseid>.vital files")
    source.add_argument("--cases", type=_case_ids, metavar="1,5,9", help="fetched over HTTP")
    source.add_argument(
        "--milestone",
        choices=tuple(MILESTONE_CASES),
        help="the first 50/200/1000 cases with PLETH and a glucose draw, fetched over HTTP",
    )
    prepare.add_argument(
        "--labs",
        type=Path,
        metavar="FILE.csv",
        help="caseid,dt,name,result (default: fetched from --source-url, --vital-dir too)",
    )
    prepare.add_argument("--window-seconds", type=seconds, default=1.0)
    prepare.add_argument("--sample-rate", type=float, default=100.0, metavar="HZ")
    prepare.add_argument("--stride-seconds", type=seconds, default=None, help="default: =window")
    prepare.add_argument("--label-window-minutes", type=duration_type("m"), default=30.0)
    prepare.add_argument("--label-method", choices=LABEL_METHODS, default="nearest")
    prepare.add_argument("--workers", type=count, default=_cores(), help="default: the cores")
    prepare.add_argument("--source-url", default=DEFAULT_SOURCE_URL)

    bench = commands.add_parser(
        "bench-prepare", help="cases/min and windows/s of prepare-vitaldb on synthetic cases"
    )
    bench.add_argument("--cases", type=count, default=16)
    bench.add_argument(
        "--minutes", type=duration_type("m"), default=30.0, help="recording per case"
    )
    bench.add_argument("--workers", type=count, default=_cores())
    bench.add_argument("--json", action="store_true", help="print one JSON object")


def _prepare(args: argparse.Namespace) -> int:
    from trainer.data.vitaldb.prepare import prepare_vitaldb

    outcome = prepare_vitaldb(
        PrepareConfig(
            out=args.out,
            vital_dir=args.vital_dir,
            cases=args.cases or (),
            milestone=args.milestone,
            labs=args.labs,
            window_seconds=args.window_seconds,
            sample_rate=args.sample_rate,
            stride_seconds=args.stride_seconds,
            label_window_minutes=args.label_window_minutes,
            label_method=args.label_method,
            workers=args.workers,
            source_url=args.source_url,
        )
    )
    verb = "holds" if outcome.already_done else "wrote"
    print(
        f"{args.out} {verb} {outcome.windows} windows from {outcome.cases} cases "
        f"({outcome.skipped} skipped; see prepare_summary.json)"
    )
    return 0


def _dispatch(args: argparse.Namespace) -> int:
    # Heavy modules (torch) load per command: `--help` and flag errors stay instant.
    if args.command == "synth":
        from trainer.data.synth import synthesize

        config = SynthConfig(
            args.out, args.cases, args.windows_per_case, args.window_length, args.seed, args.force
        )
        out = synthesize(config)
        print(
            f"wrote {config.cases * config.windows_per_case} windows of "
            f"{config.window_length} samples ({config.cases} cases) to {out}"
        )
        return 0
    if args.command == "train":
        from trainer.loop.train import train

        return train(run_config_from_flags(args))
    if args.command == "launch":
        return _launch(args.torchrun_args)
    if args.command == "sweep":
        from trainer.sweep.driver import run_sweep

        return run_sweep(args.dir)
    if args.command == "evaluate":
        from trainer.loop.evaluate import evaluate_checkpoint

        metrics = evaluate_checkpoint(
            args.data, args.checkpoint, args.split, other_data=args.allow_other_data
        )
        print(json.dumps(metrics, indent=2))
        return 0
    if args.command == "sync":
        from trainer.checkpoints.final_upload import sync_and_mark

        return sync_and_mark(args.run_dir, args.checkpoint_uri)
    if args.command == "prepare-vitaldb":
        return _prepare(args)
    if args.command in ("dataset-fetch", "dataset-publish"):
        from trainer.data import manifest

        if args.command == "dataset-fetch":
            print(manifest.fetch(args.uri, args.dest), flush=True)
        else:
            print(manifest.publish(args.dir, args.uri), flush=True)
        return 0
    return _bench(args)


def _bench(args: argparse.Namespace) -> int:
    """bench, bench-checkpoint, bench-prepare: each measures in its own module."""
    if args.command == "bench-prepare":
        from trainer.bench.prepare import run_bench_prepare

        return run_bench_prepare(args.cases, args.minutes, args.workers, json_output=args.json)
    if args.command == "bench-checkpoint":
        from trainer.bench.checkpoint import run_bench_checkpoint

        return run_bench_checkpoint(
            args.uri,
            every_seconds=args.every,
            round_seconds=args.round_seconds,
            rounds=args.rounds,
            repeats=args.repeats,
            upload_only=args.upload_only,
            batch_size=args.batch_size,
            json_output=args.json,
        )
    if args.time_to_quality:
        import torch

        from trainer.bench.time_to_quality import run_time_to_quality

        size = "m2" if torch.cuda.is_available() and not args.quick else "tiny"
        return run_time_to_quality(size, args.target_mae, args.json, args.batch_size, args.nproc)
    from trainer.bench.train_step import run_bench

    return run_bench(
        json_output=args.json,
        record=args.record,
        quick=args.quick,
        batch_size=args.batch_size,
        graph=not args.no_graph,
    )


def _launch(torchrun_args: list[str]) -> int:
    """torchrun over `train` (trainer.loop.launcher), its flags checked here first: a bad
    flag or a global batch that does not split is exit 2 before any rank starts."""
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
    """Storage sync, resume and spot notices log; the SDKs' INFO chatter stays out."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    for noisy in ("botocore", "boto3", "s3transfer", "urllib3", "azure"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "train":  # what it prints outlives its container (run_log)
        keep_run_log(args.run_dir)
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
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except UploaderBusy as error:  # before anything was written: try again later
        print(f"error: {error}", file=sys.stderr)
        return EXIT_STOPPED
    except OSError as error:  # a full disk, a read-only run dir: one line, exit 74
        if exit_code_for(error) != EXIT_UNWRITABLE:
            raise
        print(f"error: {unwritable_message(error)}", file=sys.stderr)
        return EXIT_UNWRITABLE


if __name__ == "__main__":
    from trainer.loop.launcher import exit_process

    exit_process(main())
