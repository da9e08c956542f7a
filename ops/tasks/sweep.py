"""`fab sweep`: a search over trainer flags that runs on the box without this machine.

This ships the image and the dataset as `fab train` does, writes the sweep's spec to
the box and starts its driver (`ops.run.sweep.start_sweep`, step by step); from then on
the box runs the queue, stops it at checkpoints when the box is stopped, and the resume
unit brings it back.
`fab runs --sweep ID` ranks the trials, from storage, whether the box is up or not.
"""

from __future__ import annotations

from invoke.exceptions import Exit
from rich.console import Console

from ops.image.shipping import ImageSource
from ops.remote.boxes import box_for
from ops.run import sweep as on_box_sweep
from ops.run.names import checked_name
from ops.target.resolve import resolve_target
from ops.tasks.flags import (
    BUILD_HELP,
    IMAGE_HELP,
    STACK_HELP,
    TARGET_HELP,
    task,
    trainer_flags,
)
from ops.terminal_text import markup_safe
from trainer.sweep import space

console = Console(stderr=True, soft_wrap=True)


@task(
    iterable=["param", "build_arg"],
    help={
        "dataset": "dataset in the stack's storage (see upload-data)",
        "param": "a flag to vary: NAME=A,B,C (listed) or NAME=LOW:HIGH[:log] (a range); "
        f"repeatable; NAME one of {', '.join(space.TUNABLE)}",
        "trials": f"how many (default: the grid's size, else {on_box_sweep.DEFAULT_TRIALS})",
        "method": "grid, random or tpe (default: grid when every --param is listed, else random)",
        "concurrent": "trials at once (default: one per GPU, 1 on a CPU box); more than the "
        "GPUs share them",
        "prune": "stop a trial whose validation MAE lags the others' median at the same epoch",
        "seed": "the sampler's seed",
        "trainer-args": "`python -m trainer train` flags every trial gets, quoted as one string",
        "name": "a label for the sweep",
        "sweep": "sweep id (default: a new one); an existing one resumes where it stopped",
        "stop": "stop the sweep --sweep ID (as `fab stop --run ID` does): its trials "
        "checkpoint; nothing resumes it",
        **BUILD_HELP,
        "image-name": IMAGE_HELP,
        "target": TARGET_HELP,
        "stack": STACK_HELP,
    },
)
def sweep(
    c,
    dataset="",
    param=None,
    trials=0,
    method="",
    concurrent=0,
    prune=False,
    seed=0,
    trainer_args="",
    name="",
    sweep="",
    stop=False,
    base_image="",
    build_arg=None,
    extra_ca="",
    image_name="",
    target="",
    stack="",
):
    """Search trainer flags with trials on the box, which runs the sweep by itself."""
    split_trainer_args = trainer_flags(trainer_args)  # an unbalanced quote: before any box
    box = box_for(resolve_target(target or None, stack or None))
    if stop:
        if not sweep:
            raise Exit("which sweep? pass --stop --sweep ID (`fab runs` lists sweeps' trials)")
        on_box_sweep.stop_and_tell(box, checked_name(sweep, "--sweep"))
        return
    flags = on_box_sweep.SweepFlags(
        dataset=dataset, param=tuple(param or ()), trials=int(trials), method=method,
        concurrent=int(concurrent), prune=prune, seed=int(seed),
        trainer_args=tuple(split_trainer_args), name=name,
    )  # fmt: skip
    image = ImageSource(image_name, base_image, tuple(build_arg or ()), extra_ca)
    spec = on_box_sweep.start_sweep(box, sweep, flags, image)
    sweep_id = spec.sweep_id
    print(sweep_id)
    # A resumed sweep's spec is the box's or storage's: its words shown as letters.
    searched = markup_safe(f"{', '.join(spec.params)} ({spec.method}")
    console.print(
        f"sweep {sweep_id} started on {box.address}: {spec.trials} trials of "
        f"{searched}, {spec.concurrent} at a time); the box runs it without this machine\n"
        f"  trials:  fab runs --sweep {sweep_id}\n"
        f"  status:  fab status --run {sweep_id}   (log: fab logs --run {sweep_id})\n"
        f"  stop:    fab stop --run {sweep_id}   (resume: fab sweep --sweep {sweep_id})"
    )
