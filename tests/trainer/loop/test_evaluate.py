import json

from trainer.__main__ import main


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
    assert code == 2 and "no such checkpoint" in capsys.readouterr().err
