import json

from tests.trainer.conftest import TINY_CASES, TINY_WINDOW_LENGTH
from trainer.__main__ import main
from trainer.config import SynthConfig
from trainer.data.synth import synthesize


def _evaluate(data, run_dir, split: str) -> int:
    checkpoint = str(run_dir / "checkpoints/best.pt")
    return main(["evaluate", "--data", str(data), "--checkpoint", checkpoint, "--split", split])


def test_evaluate_prints_json_metrics_for_the_test_split(trained_run, tiny_data, capsys):
    code = _evaluate(tiny_data, trained_run, "test")
    result = json.loads(capsys.readouterr().out)
    splits = json.loads((trained_run / "splits.json").read_text())
    assert code == 0
    assert result["split"] == "test" and result["cases"] == splits["test"]
    assert result["mae"] > 0 and result["baseline"]["mae"] > 0


def test_evaluate_matches_the_summary_written_by_train(trained_run, tiny_data, capsys):
    assert _evaluate(tiny_data, trained_run, "val") == 0
    summary = json.loads((trained_run / "summary.json").read_text())
    assert json.loads(capsys.readouterr().out)["mae"] == summary["val"]["mae"]


def test_evaluate_of_a_missing_checkpoint_is_a_user_error(tiny_data, tmp_path, capsys):
    code = main(["evaluate", "--data", str(tiny_data), "--checkpoint", str(tmp_path / "x.pt")])
    assert code == 2 and f"{tmp_path / 'x.pt'}: no such file" in capsys.readouterr().err


def test_evaluate_on_another_dataset_is_refused_naming_the_flag_that_allows_it(
    trained_run, tmp_path, capsys
):
    other = synthesize(SynthConfig(tmp_path / "other", 6, 20, TINY_WINDOW_LENGTH, seed=9))
    assert _evaluate(other, trained_run, "test") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not the dataset this checkpoint was trained on" in err
    assert "--allow-other-data" in err


def test_evaluate_on_another_dataset_scores_it_when_asked(trained_run, tiny_data, tmp_path, capsys):
    other = synthesize(SynthConfig(tmp_path / "other", TINY_CASES, 20, TINY_WINDOW_LENGTH, seed=9))
    checkpoint = str(trained_run / "checkpoints/best.pt")
    argv = ["evaluate", "--data", str(other), "--checkpoint", checkpoint, "--allow-other-data"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["mae"] > 0
    assert "warning:" in captured.err
