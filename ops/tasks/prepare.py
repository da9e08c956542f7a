"""Make datasets on the box from the open VitalDB dataset."""

from __future__ import annotations

import shlex

from invoke.exceptions import Exit
from rich.console import Console

from ops.image.shipping import ImageSource, image_on_box
from ops.remote.boxes import box_for
from ops.run import on_box
from ops.run import prepare as prepare_on_box
from ops.run.names import checked_name
from ops.target.resolve import resolve_target
from ops.tasks.flags import BUILD_HELP, IMAGE_HELP, STACK_HELP, TARGET_HELP, task
from ops.terminal_text import markup_safe
from stack import storage_layout

MILESTONES = ("M1", "M2", "M3")
console = Console(stderr=True, soft_wrap=True)


def _source_args(milestone: str, cases: str, name: str) -> tuple[list[str], str]:
    """prepare-vitaldb's case flags and the dataset's name."""
    if bool(milestone) == bool(cases):
        raise Exit("which cases? pass --milestone M1|M2|M3 or --cases 1,5,9 (one of them)")
    if cases:
        if not name:
            raise Exit("--cases needs --name NAME for the dataset (e.g. --name vitaldb-mine)")
        return ["--cases", cases], checked_name(name, "--name", "dataset name")
    if milestone.upper() not in MILESTONES:
        raise Exit(f"--milestone {milestone!r}: expected one of {', '.join(MILESTONES)}")
    milestone = milestone.upper()
    return ["--milestone", milestone], checked_name(
        name or f"vitaldb-{milestone.lower()}", "--name", "dataset name"
    )


@task(
    iterable=["build_arg"],
    help={
        "milestone": "the seeds' M1/M2/M3: the first 50/200/1000 cases with PLETH and glucose",
        "cases": "case ids instead, e.g. 1,5,9 (needs --name)",
        "name": "dataset name in storage (default: vitaldb-m1 for --milestone M1, ...)",
        "prepare-args": "more `python -m trainer prepare-vitaldb` flags, quoted as one string",
        **BUILD_HELP,
        "image-name": IMAGE_HELP,
        "target": TARGET_HELP,
        "stack": STACK_HELP,
    },
)
def prepare_data(
    c,
    milestone="",
    cases="",
    name="",
    prepare_args="",
    base_image="",
    build_arg=None,
    extra_ca="",
    image_name="",
    target="",
    stack="",
):
    """Prepare VitalDB cases on the box and publish them as a dataset."""
    case_args, name = _source_args(milestone, cases, name)
    box = box_for(resolve_target(target or None, stack or None))
    uri = storage_layout.dataset_uri(box.target.storage_uri, name)
    image = image_on_box(box, ImageSource(image_name, base_image, tuple(build_arg or ()), extra_ca))
    user = on_box.box_user(box)
    args = [*case_args, *shlex.split(prepare_args)]
    prepare_on_box.run_preparation(box, image, name, user, args)
    meta = prepare_on_box.dataset_meta(box, name)
    # The container's last line: the box's words, shown as letters.
    console.print(markup_safe(prepare_on_box.publish_on_box(box, image, name, user, uri)))
    print(uri)
    console.print(f"{prepare_on_box.made(meta)}; train on it: fab train --dataset {name}")
