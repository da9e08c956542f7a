import csv
import json

from trainer.__main__ import main
from trainer.bench.throughput_record import RECORD_FIELDS
from trainer.model import FORMULATIONS

BENCH_KEYS = (
    "pipeline_windows_per_s",
    "train_windows_per_s",
    "baseline_pipeline_windows_per_s",
    "baseline_train_windows_per_s",
)


def test_quick_bench_prints_the_four_rates_as_json(capsys):
    assert main(["bench", "--quick", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert all(result[key] > 0 for key in BENCH_KEYS)
    assert result["train_flops_per_window"] > 1e8  # ResNet34-1D at L=100: ~0.24 GFLOP


def test_record_appends_rows_under_one_header(tmp_path, capsys):
    record = tmp_path / "measured_throughput.csv"
    for _ in range(2):
        assert main(["bench", "--quick", "--record", str(record)]) == 0
    rows = list(csv.DictReader(record.open()))
    assert record.read_text().splitlines()[0] == ",".join(RECORD_FIELDS)
    assert len(rows) == 4 and rows[0]["gpu"] == "cpu" and float(rows[0]["train_windows_per_s"]) > 0
    assert "windows/s" in capsys.readouterr().out


def test_recorded_row_is_one_fab_plan_reads(tmp_path, capsys):
    # The CSV's columns are written here and read by ops.plan.throughput: one contract
    # (ARCHITECTURE.md), two spellings of it; this keeps them in step.
    from ops.plan.throughput import load_measured

    record = tmp_path / "measured_throughput.csv"
    assert main(["bench", "--quick", "--record", str(record)]) == 0
    small, headline = load_measured(record)
    assert small.gpu == "cpu" and small.window_length == 100 and small.train_windows_per_s > 0
    assert (small.batch_size * 4, small.step) == (headline.batch_size, headline.step)
    assert (headline.batch_size, headline.step) == (32, "eager gemm")


def test_the_headline_batch_is_what_train_takes_for_m3_sized_data():
    from ops.plan.estimate import MILESTONE_WINDOWS
    from trainer.bench.train_step import STANDS_FOR_WINDOWS
    from trainer.loop.defaults import per_rank_batch, train_windows_of

    assert MILESTONE_WINDOWS["M3"] == STANDS_FOR_WINDOWS
    assert per_rank_batch("cuda", train_windows_of(STANDS_FOR_WINDOWS)) == 4096


def test_bench_times_every_formulation_and_reports_the_one_train_takes(capsys):
    assert main(["bench", "--quick", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["formulations_windows_per_s"]) == set(FORMULATIONS)
    assert result["formulation"] == "gemm"  # on a CPU; the fastest timed on a GPU
    assert result["train_windows_per_s"] == result["formulations_windows_per_s"]["gemm"]
    assert result["batch_size"] <= 256 and result["gpu_memory_gib"] is None


def test_no_graph_bench_records_eager_rows(tmp_path, capsys):
    record = tmp_path / "measured_throughput.csv"
    assert main(["bench", "--quick", "--no-graph", "--record", str(record)]) == 0
    rows = list(csv.DictReader(record.open()))
    assert [row["step"].split()[0] for row in rows] == ["eager", "eager"]
