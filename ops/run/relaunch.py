"""`fab train --run ID` for a run that was launched: it resumes as launched, from the
run's launch record (launch.json in storage, where `fab train` stores it before the
run's container starts: it outlives the box).

What the run knows is not asked again: its dataset (where it was fetched from), its
`train` flags, its image and its box count come from the record. A flag given now
that would change what the run trains is refused in one line, naming it; a resume may
change only what `MAY_CHANGE` says (the run's length, its deadline, the image it runs
in) and how often it reports or checkpoints (a field that is no `setting`). The
trainer would refuse a checkpoint of another model or batch anyway (exit 2, on the
box, after the image shipped): this says it here, first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from invoke.exceptions import Exit

from box import contract
from box.contract import LaunchRecord
from ops.image.shipping import ImageSource
from ops.run.ids import stored_sweep
from ops.target.forms import image_reference_ok, storage_uri_ok
from ops.target.schema import Target
from ops.terminal_text import printable
from stack import storage_layout
from trainer.config import (
    UserError,
    check_train_flags,
    not_settings,
    train_flag_fields,
)
from trainer.flags import flag_name

MAY_CHANGE = ("--epochs", "--max-steps", "--hours", "--image-name")
"""What a resume may be given that differs from its launch (also `--base-image`,
`--build-arg`, `--extra-ca`, which make a new image as `--image-name` names one)."""
LENGTH_SETTINGS = ("train.epochs", "train.max_steps")
"""The run's length: `--epochs` and `--max-steps`, also inside `--trainer-args`."""
ONE_FORM = "`fab train --run {run_id}` alone resumes it as launched"


@dataclass(frozen=True)
class Given:
    """What `fab train` was given now, beside `--run`."""

    data_uri: str = ""
    dataset: str = ""
    trainer_args: tuple[str, ...] = ()
    """Every `train` flag given now: `--epochs`, `--max-steps`, `--name`, `--trainer-args`."""
    name: str = ""
    image: ImageSource = field(default_factory=ImageSource)


@dataclass(frozen=True)
class Resumed:
    """The run as launched, with what a resume may change changed."""

    data_uri: str
    trainer_args: tuple[str, ...]
    name: str
    image: ImageSource
    epochs: int
    """What it trains to: `--hours auto` estimates from it."""


def for_run(target: Target, run_id: str, given: Given) -> Resumed | None:
    """Run `run_id` as launched, with `given` applied; None for an id never launched
    (a new run of that id)."""
    if stored_sweep(target.storage_uri, run_id):
        raise Exit(
            f"{run_id} is a sweep, not a run: `fab sweep --sweep {run_id}` resumes it "
            "(`fab runs --sweep` lists its trials)"
        )
    record = launch_record(target, run_id)
    if record is None:
        return None
    if record.sweep:
        sweep = printable(record.sweep, 80)  # the bucket's to write
        raise Exit(
            f"run {run_id} is trial {record.trial} of sweep {sweep}: its sweep resumes it, "
            f"with its values (`fab sweep --sweep {sweep}`)"
        )
    return resumed(record, target, run_id, given)


def which_dataset(run_id: str) -> str:
    """What a new run (`run_id` "" or one never launched) given no dataset is told."""
    new = f"no run {run_id} was launched (no {contract.LAUNCH_FILE} in storage): a new run; "
    return (new if run_id else "") + (
        "which dataset? pass --data-uri URI or --dataset NAME (see `fab upload-data`)"
    )


def launch_record(target: Target, run_id: str) -> LaunchRecord | None:
    """Run `run_id`'s launch record in storage (stored before its container starts, it
    outlives the box); None for a run never launched."""
    from trainer.storage import ObjectNotFound, open_store

    try:
        text = open_store(storage_layout.run_uri(target.storage_uri, run_id)).read_bytes(
            contract.LAUNCH_FILE
        )
    except ObjectNotFound:
        return None
    except Exception as error:  # whether the id is a run's is unknown
        raise Exit(
            f"cannot read run {run_id}'s {contract.LAUNCH_FILE} in {target.storage_uri} "
            f"({type(error).__name__}); a resume takes its dataset and flags from it: "
            "try again once storage answers"
        ) from None
    record, problems = LaunchRecord.checked(text)
    if problems or not record.run_id:
        said = "; ".join(problems) or "no run_id"
        raise Exit(
            f"run {run_id}'s {contract.LAUNCH_FILE} cannot be read ({said}); a resume takes "
            "its dataset and flags from it: start a new run (leave --run out)"
        )
    return record


def resumed(record: LaunchRecord, target: Target, run_id: str, given: Given) -> Resumed:
    """The run `record` launched, with `given` applied where a resume may change it;
    Exit, one line, naming a flag that would change anything else."""
    data_uri = _data_uri(record, target, run_id, given)
    _same_box_count(record, target, run_id)
    recorded = _recorded_args(record, run_id)
    epochs = _refuse_changes(recorded, given.trainer_args, run_id)
    name = record.name or ""
    if given.name and given.name != name:
        raise Exit(_refusal(run_id, f"--name {given.name}", _with("--name", name or None)))
    args = (*recorded, *given.trainer_args)
    return Resumed(data_uri, args, name, _image(record, given.image), epochs)


def _data_uri(record: LaunchRecord, target: Target, run_id: str, given: Given) -> str:
    """Where the run's dataset was fetched from; a dataset given now must be that one."""
    asked = given.data_uri or (
        storage_layout.dataset_uri(target.storage_uri, given.dataset) if given.dataset else ""
    )
    if record.data_uri and not storage_uri_ok(record.data_uri):  # the bucket's to write
        if asked:
            return asked
        raise Exit(
            f"run {run_id}'s {contract.LAUNCH_FILE} names no usable dataset URI "
            f"({printable(record.data_uri, 120)}); pass --data-uri URI to resume it"
        )
    if not record.dataset and not record.data_uri:
        raise Exit(
            f"run {run_id}'s {contract.LAUNCH_FILE} names no dataset; start a new run "
            "(leave --run out) with --dataset NAME"
        )
    launched = record.data_uri or storage_layout.dataset_uri(target.storage_uri, record.dataset)
    if asked and asked.rstrip("/") != launched.rstrip("/"):
        now = f"--data-uri {given.data_uri}" if given.data_uri else f"--dataset {given.dataset}"
        was = ("--dataset", record.dataset) if record.dataset else ("--data-uri", launched)
        raise Exit(_refusal(run_id, now, _with(*was)))
    return launched


def _same_box_count(record: LaunchRecord, target: Target, run_id: str) -> None:
    launched = record.boxes or 1
    if launched != target.node_count:
        raise Exit(
            f"run {run_id} was launched on {launched} box(es), {target.source} has "
            f"{target.node_count}; a resume runs on the boxes it was launched on: set "
            f"nodeCount to {launched} (`pulumi up`), or start a new run (leave --run out)"
        )


def _recorded_args(record: LaunchRecord, run_id: str) -> tuple[str, ...]:
    args = record.trainer_args or []
    if not all(isinstance(arg, str) for arg in args):
        raise Exit(
            f"run {run_id}'s {contract.LAUNCH_FILE}: trainer_args holds what is no flag; "
            "start a new run (leave --run out)"
        )
    return tuple(args)


def _refuse_changes(recorded: tuple[str, ...], given: tuple[str, ...], run_id: str) -> int:
    """Exit naming the first setting `given` changes that a resume may not: compared as
    the trainer parses them, so `--lr 1e-3` and `--lr 0.001` are one value. The epochs
    the resumed run trains to."""
    try:
        before = _flat(check_train_flags(recorded).to_dict())
        after = _flat(check_train_flags([*recorded, *given]).to_dict())
    except UserError as error:  # it may quote the recorded flags: the bucket's words
        raise Exit(printable(error, 400)) from None
    free = {*LENGTH_SETTINGS, *not_settings()}
    for key, value in after.items():
        if key not in free and before.get(key) != value:
            flag = _flag_of(key)
            now = f"{flag} {value}" if value is not None else f"{flag} left out"
            raise Exit(_refusal(run_id, now, _with(flag, before.get(key))))
    return int(after["train.epochs"])


def _with(flag: str, value: object) -> str:
    """How the run was launched as to `flag`: `with --model resnet18`, `without --lr`."""
    return f"without {flag}" if value is None else f"with {flag} {value}"


def _refusal(run_id: str, now: str, launched: str) -> str:
    return (
        f"{printable(now, 200)}: run {run_id} was launched {printable(launched, 200)} (its "
        f"{contract.LAUNCH_FILE}); a resume may change only {', '.join(MAY_CHANGE)} and how "
        f"often it checkpoints or logs: {ONE_FORM.format(run_id=run_id)}, a new run (leave "
        "--run out) takes other flags"
    )


def _image(record: LaunchRecord, given: ImageSource) -> ImageSource:
    """The image given now (a name, or a build's flags); else the run's own."""
    if given != ImageSource():
        return given
    if record.image is None:
        return given  # a record from before images were kept: this tree's
    if not image_reference_ok(record.image):
        raise Exit(
            f"{contract.LAUNCH_FILE} names no usable image ({printable(record.image, 120)}); pass "
            "--image-name NAME to resume in that image"
        )
    return ImageSource(recorded=record.image)


def _flat(config: dict, prefix: str = "") -> dict:
    found = {}
    for key, value in config.items():
        if isinstance(value, dict):
            found.update(_flat(value, f"{prefix}{key}."))
        else:
            found[f"{prefix}{key}"] = value
    return found


def _flag_of(dotted: str) -> str:
    """`model.arch` -> the flag that sets it (`--model`)."""
    for section, _config, item in train_flag_fields():
        if (f"{section}.{item.name}" if section else item.name) == dotted:
            return flag_name(item)
    return dotted
