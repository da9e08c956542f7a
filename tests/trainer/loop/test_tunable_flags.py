"""Every tunable value the trainer's configs hold has a `train` flag, bounded, named
in its error; a run's name and a sweep trial's untouched test split are recorded."""

import dataclasses
import json

import pytest

from tests.trainer.conftest import tiny_run_config
from trainer.__main__ import _parser, main
from trainer.config import (
    TRAIN_CONFIGS,
    DataConfig,
    ModelConfig,
    OptimConfig,
    TrainConfig,
    UserError,
    check_train_flags,
    not_settings,
    run_config_from_flags,
)
from trainer.flags import field_docs, flag_fields
from trainer.loop.train import train
from trainer.quantities import duration_forms

# (flag, value given, config section, field, value expected there)
FLAGS = [
    ("--kernel-size", "5", "model", "kernel_size", 5),
    ("--dropout", "0.35", "model", "dropout", 0.35),
    ("--model", "resnet18", "model", "arch", "resnet18"),
    ("--weight-decay", "0.05", "optim", "weight_decay", 0.05),
    ("--decay-norms-and-biases", None, "optim", "decay_norms_and_biases", True),
    ("--beta2", "0.98", "optim", "beta2", 0.98),
    ("--warmup-fraction", "0.1", "optim", "warmup_fraction", 0.1),
    ("--min-lr-fraction", "0.1", "optim", "min_lr_fraction", 0.1),
    ("--grad-clip", "0.5", "optim", "grad_clip_norm", 0.5),
    ("--grad-accum", "2", "optim", "grad_accum", 2),
    ("--lr", "0.001", "optim", "lr", 0.001),
    ("--val-fraction", "0.2", "data", "val_fraction", 0.2),
    ("--test-fraction", "0.2", "data", "test_fraction", 0.2),
    ("--epochs", "3", "train", "epochs", 3),
    ("--batch-size", "64", "train", "batch_size", 64),
    ("--precision", "fp32", "train", "precision", "fp32"),
    ("--seed", "7", "train", "seed", 7),
    ("--patience", "2", "train", "patience", 2),
    ("--max-steps", "9", "train", "max_steps", 9),
    ("--log-every", "3", "train", "log_every_steps", 3),
    ("--formulation", "torch", "train", "formulation", "torch"),
    ("--deterministic", None, "train", "deterministic", True),
    ("--compile", None, "train", "compile", True),
    ("--no-graph", None, "train", "graph", False),
    ("--name", "lr-probe", "train", "name", "lr-probe"),
    ("--skip-test", None, "train", "skip_test", True),
]
# Config values no flag sets: where the run is (--data, --run-dir give the paths) and
# what the trainer derives (torchrun's world size, the per-rank batch).
NOT_FLAGS = {"data_dir", "run_dir", "world_size", "per_rank_batch_size"}


def _config(*flags: str):
    args = _parser().parse_args(["train", "--data", "d", "--run-dir", "r", *flags])
    return run_config_from_flags(args)


@pytest.mark.parametrize(("flag", "given", "section", "field", "expected"), FLAGS)
def test_each_flag_reaches_its_config_value(flag, given, section, field, expected):
    config = _config(flag, *([given] if given is not None else []))
    assert getattr(getattr(config, section), field) == expected


def test_every_value_the_configs_hold_has_a_flag():
    held = {
        field.name
        for config in (DataConfig, ModelConfig, OptimConfig, TrainConfig)
        for field in dataclasses.fields(config)
    }
    assert held - NOT_FLAGS == {field for _, _, _, field, _ in FLAGS}


def test_each_flag_has_its_fields_default_and_its_docstring_for_help_and_no_other():
    train = _parser()._subparsers._group_actions[0].choices["train"]
    actions = {action.dest: action for action in train._actions if action.dest != "help"}
    fields = {
        field.name: (config, field) for config in TRAIN_CONFIGS for field in flag_fields(config)
    }
    assert set(actions) == set(fields)
    for name, (config, field) in fields.items():
        if field.default is not dataclasses.MISSING:
            assert actions[name].default == field.default, name
        doc = " ".join(field_docs(config)[name].split())
        assert actions[name].help.startswith(doc.removesuffix(".")), name
        unit = field.metadata["unit"]  # a duration's help adds the forms it takes, in its unit
        assert not unit or duration_forms(unit) in actions[name].help, name


def test_flags_left_out_give_the_configs_own_defaults():
    config = _config()
    assert config.model == ModelConfig()
    assert dataclasses.replace(config.optim, lr=None) == OptimConfig()


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--kernel-size", "4"),
        ("--kernel-size", "17"),
        ("--dropout", "1.0"),
        ("--dropout", "-0.1"),
        ("--weight-decay", "-0.01"),
        ("--weight-decay", "2.0"),
        ("--warmup-fraction", "1.0"),
        ("--min-lr-fraction", "1.5"),
        ("--grad-clip", "-1.0"),
        ("--grad-clip", "inf"),
        ("--val-fraction", "0.5"),
        ("--test-fraction", "0.0"),
        ("--lr", "nan"),
    ],
)
def test_a_value_out_of_bounds_is_one_line_naming_flag_value_and_bounds(
    tmp_path, capsys, flag, value
):
    code = main(["train", "--data", str(tmp_path), "--run-dir", str(tmp_path), flag, value])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"{flag} {value}:" in err
    assert "expected" in err or "must" in err


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--epochs", "0"], "--epochs 0: must be at least 1"),
        (["--kernel-size", "4"], "--kernel-size 4: expected an odd width"),
        (["--no-such-flag"], "trainer flags: unrecognized arguments: --no-such-flag"),
        (["--precision", "fp8"], "argument --precision: invalid choice: 'fp8'"),
    ],
)
def test_fab_checks_trainer_flags_with_the_trainers_own_parser(flags, said):
    with pytest.raises(UserError, match=said):
        check_train_flags(flags)


def test_flags_fab_checks_are_what_the_trainer_runs():
    config = check_train_flags(["--epochs", "3", "--grad-clip", "0.5", "--skip-test"])
    assert (config.train.epochs, config.optim.grad_clip_norm, config.train.skip_test) == (
        3,
        0.5,
        True,
    )


def test_a_name_with_a_line_break_is_refused(tmp_path, capsys):
    code = main(["train", "--data", str(tmp_path), "--run-dir", str(tmp_path), "--name", "a\nb"])
    assert code == 2 and "--name 'a\\nb'" in capsys.readouterr().err


def test_the_name_is_in_config_and_summary_and_a_resume_without_one_keeps_it(tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    assert train(tiny_run_config(tiny_data, run_dir, max_steps=1, name="first look")) == 0
    assert train(tiny_run_config(tiny_data, run_dir, max_steps=2)) == 0
    assert json.loads((run_dir / "config.json").read_text())["train"]["name"] == "first look"
    assert json.loads((run_dir / "summary.json").read_text())["name"] == "first look"


def test_a_resume_with_another_weight_decay_is_refused_naming_it(tiny_data, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert train(tiny_run_config(tiny_data, run_dir, max_steps=1)) == 0
    flags = ["--data", str(tiny_data), "--run-dir", str(run_dir), "--model", "resnet18"]
    assert main(["train", *flags, "--batch-size", "32", "--weight-decay", "0.2"]) == 2
    assert "optim.weight_decay was 0.01 in the run dir's checkpoint, now 0.2" in (
        capsys.readouterr().err
    )


def test_a_run_that_skips_the_test_split_reports_validation_only(tiny_data, tmp_path):
    run_dir = tmp_path / "run"
    assert train(tiny_run_config(tiny_data, run_dir, max_steps=2, skip_test=True)) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["test"] is None and "mae" in summary["val"]
    assert "Test cases: not evaluated" in (run_dir / "report.md").read_text()
    assert not (run_dir / "plots" / "clarke_grid.png").exists()


def _flat(record: dict, prefix: str = "") -> set[str]:
    return {
        key
        for name, value in record.items()
        for key in (
            _flat(value, f"{prefix}{name}.") if isinstance(value, dict) else {prefix + name}
        )
    }


def test_where_a_run_is_and_how_often_it_reports_are_not_its_settings():
    keys = not_settings()
    assert {"data.data_dir", "train.run_dir", "checkpoint_uri", "train.log_every_steps"} <= keys
    assert not keys & {"optim.lr", "train.batch_size", "model.arch", "train.epochs"}
    # Each is a key of config.json, as `fab runs` flattens it.
    assert keys <= _flat(_config().to_dict())
