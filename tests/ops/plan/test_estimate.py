"""ops.plan and `fab plan`: run cost arithmetic on a fixed small catalog, ordering,
deadline pick, retired sizes, measured-vs-estimated throughput."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ops.plan import estimate as plan
from ops.plan import throughput, workload
from ops.plan.pricing import HourlyPrice
from ops.plan.throughput import MeasuredThroughput
from stack import catalog, offerings
from stack.catalog import VmSize
from tests.ops.conftest import assert_one_line_error
from tests.paths import REPO
from trainer.config import DEFAULT_EPOCHS

FAB = str(Path(sys.executable).with_name("fab"))

# A fixed catalog: prices chosen so the arithmetic comes out round.
T4 = VmSize("Test_T4", "azure", "T4", 1, 16, 4, 28, 1.0, 0.4, "eastus", ("eastus",))
A100 = VmSize("Test_A100", "azure", "A100 80GB", 1, 80, 24, 220, 4.0, None, "eastus",
              ("eastus", "westeurope"))  # fmt: skip
A10G = VmSize("test.a10g", "aws", "A10G", 1, 24, 4, 16, 2.0, 0.5, "us-east-1", ("us-east-1",))
V100_RETIRED = VmSize("Test_V100", "azure", "V100 16GB", 1, 16, 6, 112, 3.0, None, "eastus",
                      ("eastus",), status="retired", retired_on="2025-09-30",
                      replacement="Test_A100")  # fmt: skip
FIXED_CATALOG = (T4, A100, A10G, V100_RETIRED)


def _measured(
    gpu,
    windows_per_s,
    gpu_count=1,
    precision="bf16",
    window_length=100,
    date="2026-11-01",
    batch=1024,
):
    return MeasuredThroughput(
        date, gpu, gpu_count, precision, batch, window_length, windows_per_s, 1e6, "2.13.0", "graph"
    )


# Every size at a round measured speed: 10k windows/s (T4, A10G) and 40k (A100).
MEASURED = (
    _measured("Tesla T4", 10_000, precision="fp16"),
    _measured("NVIDIA A10G", 10_000),
    _measured("NVIDIA A100 80GB PCIe", 40_000),
)


def _plan(**kwargs):
    request = plan.PlanRequest(**{"windows": 1_000_000, "epochs": 36, **kwargs})
    return plan.make_plan(request, FIXED_CATALOG, measured=MEASURED)


def _row(result, size):
    return next(r for r in result.rows if r.size == size)


def test_hours_are_setup_plus_window_passes_over_windows_per_second():
    # 36M window-passes at 10k/s = 1 h, plus setup.
    row = _row(_plan(), "Test_T4")
    assert row.hours == pytest.approx(1.0 + plan.SETUP_HOURS)
    assert row.throughput_source == "measured"


def test_run_dollars_are_hours_times_hourly_prices():
    row = _row(_plan(), "Test_T4")
    assert row.on_demand_usd == pytest.approx(1.25 * 1.0)
    assert row.spot_usd == pytest.approx(1.25 * 0.4)
    assert row.usd_per_million_window_passes == pytest.approx(1.0 / (10_000 * 3600) * 1e6)
    assert row.total_usd == pytest.approx(row.on_demand_usd + row.storage_egress_usd)


def test_size_without_spot_figure_shows_none_and_is_costed_on_demand_under_spot():
    row = _row(_plan(spot=True), "Test_A100")
    assert row.spot_usd is None
    assert row.total_usd == pytest.approx(row.on_demand_usd + row.storage_egress_usd)


def test_storage_and_egress_cover_dataset_checkpoints_and_download():
    # 1M windows x 100 float32 = 0.4 GB stored; 3 x 86.6 MB checkpoints + 50 MB results.
    results_gb = 3 * 7_218_753 * 12 / 1e9 + 0.05
    expected = (0.4 + results_gb) * 0.023 + results_gb * 0.09
    assert plan.storage_egress_usd("aws", 1_000_000, 100) == pytest.approx(expected)


def test_rows_are_sorted_by_total_cost_on_the_chosen_basis():
    on_demand = [r.size for r in _plan().rows]
    spot = [r.size for r in _plan(spot=True).rows]
    # on-demand: T4 1.25 h x $1, A100 (0.25 + 0.25) h x $4 = $2, A10G 1.25 h x $2.
    assert on_demand == ["Test_T4", "Test_A100", "test.a10g"]
    # spot: T4 $0.50, A10G $0.625, A100 has no spot figure: $2 on-demand.
    assert spot == ["Test_T4", "test.a10g", "Test_A100"]


def test_cheapest_overall_is_picked_without_a_deadline():
    assert [r.size for r in _plan().rows if r.pick] == ["Test_T4"]


def test_deadline_picks_the_cheapest_size_that_finishes_in_time():
    result = _plan(deadline_hours=1.0)
    assert [r.size for r in result.rows if r.pick] == ["Test_A100"]
    assert not _row(result, "Test_T4").within_deadline


def test_impossible_deadline_picks_nothing_and_names_the_fastest():
    result = _plan(deadline_hours=0.1)
    assert not any(r.pick for r in result.rows)
    assert any("fastest, Test_A100, needs 0.5 h" in n for n in result.notes)


def test_retired_sizes_are_excluded_with_their_replacement():
    result = _plan()
    assert "Test_V100" not in [r.size for r in result.rows]
    assert result.excluded_retired == ("Test_V100 (retired 2025-09-30; use Test_A100)",)


def test_cloud_and_region_filter_the_sizes():
    assert [r.size for r in _plan(cloud="aws").rows] == ["test.a10g"]
    assert [r.size for r in _plan(region="westeurope").rows] == ["Test_A100"]


def test_region_without_sizes_is_a_clear_error():
    with pytest.raises(ValueError, match="no current azure or aws size in region mars-1"):
        _plan(region="mars-1")


def test_live_prices_replace_the_snapshot_for_their_size():
    live = {"Test_T4": HourlyPrice(2.0, None, "eastus", "live 2026-11-22")}
    request = plan.PlanRequest(windows=1_000_000, epochs=36)
    row = _row(plan.make_plan(request, FIXED_CATALOG, live, MEASURED), "Test_T4")
    assert row.on_demand_usd == pytest.approx(1.25 * 2.0)
    assert row.price_source == "live 2026-11-22"


def test_bad_request_lists_every_problem():
    with pytest.raises(ValueError, match=r"--windows is 0.*--epochs is -1.*--cloud is 'gcp'"):
        plan.PlanRequest(windows=0, epochs=-1, cloud="gcp")


def test_estimate_uses_bf16_peak_at_the_stated_efficiency():
    est = throughput.throughput(catalog.GPUS["A100 80GB"], 1, 100)
    assert est.precision == "bf16" and est.source == "estimated"
    # 312 TFLOPS x 15% / 243.88 MFLOP per window
    assert est.windows_per_s == pytest.approx(191_897, rel=1e-4)


def test_gpus_without_bf16_are_estimated_at_fp16():
    assert throughput.throughput(catalog.GPUS["V100 16GB"], 1, 100).precision == "fp16"


def test_measurement_for_another_window_length_or_precision_is_not_used():
    gpu = catalog.GPUS["A10G"]
    rows = (_measured("NVIDIA A10G", 5, window_length=200), _measured("A10G", 5, precision="fp32"))
    assert throughput.throughput(gpu, 1, 100, rows).source == "estimated"


def test_newest_measurement_wins():
    rows = (_measured("A10G", 5, date="2026-01-01"), _measured("A10G", 7, date="2026-06-01"))
    assert throughput.throughput(catalog.GPUS["A10G"], 1, 100, rows).windows_per_s == 7


@pytest.mark.parametrize(
    ("recorded", "model", "same"),
    [
        ("NVIDIA A100-SXM4-80GB", "A100 80GB", True),
        ("NVIDIA A100-SXM4-40GB", "A100 80GB", False),
        ("NVIDIA H100 NVL", "H100 94GB", True),
        ("NVIDIA H100 80GB HBM3", "H100 80GB", True),
        ("NVIDIA L40S", "L4", False),
        ("cpu", "T4", False),
    ],
)
def test_recorded_device_names_match_catalog_gpu_models(recorded, model, same):
    assert throughput.gpu_matches(recorded, model) is same


def test_measured_csv_round_trips_and_rejects_a_wrong_header(tmp_path):
    good = tmp_path / "good.csv"
    good.write_text(",".join(throughput.MEASURED_COLUMNS) + "\n"
                    "2026-11-22,NVIDIA A10G,1,bf16,1024,100,51000.5,,2.13.0,graph\n")  # fmt: skip
    assert throughput.load_measured(good)[0].train_windows_per_s == 51000.5
    bad = tmp_path / "bad.csv"
    bad.write_text("gpu,speed\nA10G,5\n")
    with pytest.raises(ValueError, match="expected"):
        throughput.load_measured(bad)


def test_repository_measured_csv_is_readable():
    throughput.load_measured()  # the file `fab plan` reads must always parse


def _fab(*args):
    return subprocess.run([FAB, *args], cwd=REPO, capture_output=True, text=True, timeout=60)


def test_fab_lists_plan_with_a_one_line_summary():
    listing = _fab("-l")
    assert listing.returncode == 0, listing.stderr
    assert re.search(r"^\s+plan\s+Estimate hours and dollars", listing.stdout, re.MULTILINE)


def test_fab_plan_milestone_json_covers_every_current_size():
    done = _fab("plan", "--milestone", "M1", "--epochs", "100", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["request"]["windows"] == 600_000
    assert {r["size"] for r in result["rows"]} == {s.name for s in catalog.sizes()}
    totals = [r["total_usd"] for r in result["rows"]]
    priced = [t for t in totals if t is not None]
    assert totals == sorted(priced) + [None] * (len(totals) - len(priced))


def test_fab_plan_table_marks_one_row_and_names_retired_sizes():
    done = _fab("plan", "--milestone", "M3", "--epochs", "100", "--deadline", "4", "--explain")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("✔") == 2  # the marked row and the title explaining it
    assert "Standard_NC6s_v3 (retired 2025-09-30" in done.stdout


def test_fab_plan_footer_dates_which_regions_sell_which_size():
    done = _fab("plan", "--milestone", "M1", "--epochs", "1", "--explain")
    assert done.returncode == 0, done.stderr
    footer = " ".join(done.stdout.split())  # rich wraps long lines
    for cloud in catalog.CLOUDS:
        assert f"{cloud}: {offerings.of(cloud).date} (" in footer


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--epochs", "10"], "pass --windows N, --milestone M1|M2|M3 or --dataset NAME"),
        (["--windows", "0"], "--windows is 0, expected a positive count"),
        (["--windows", "-5"], "--windows is -5, expected a positive count"),
        (["--milestone", "M1", "--epochs", "0"], "--epochs is 0, expected a positive count"),
        (["--milestone", "M9", "--epochs", "10"], "--milestone is 'M9'"),
        (["--windows", "5", "--epochs", "10", "--deadline", "soon"], "--deadline is 'soon'"),
        (["--windows", "5", "--epochs", "10", "--cloud", "gcp"], "--cloud is 'gcp'"),
    ],
)
def test_fab_plan_user_errors_are_one_line_without_traceback(args, message):
    done = _fab("plan", *args)
    assert done.returncode == 1
    assert_one_line_error(done, message)


def test_fab_plan_without_epochs_costs_the_trainers_default_epochs():
    done = _fab("plan", "--milestone", "M1", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["request"]["epochs"] == DEFAULT_EPOCHS
    help_words = " ".join(_fab("--help", "plan").stdout.split())  # unwrapped
    assert f"(default: the trainer's, {DEFAULT_EPOCHS})" in help_words


@pytest.mark.parametrize(
    ("meta", "size"),
    [
        ({"source": "vitaldb", "windows": 612_345, "window_length": 100}, (612_345, 100)),
        ({"source": "synth", "windows": 500, "window_length": 64}, (500, 64)),
        ({"source": "synthetic", "cases": 5, "windows_per_case": 40, "window_length": 64},
         (200, 64)),
    ],
)  # fmt: skip
def test_dataset_size_comes_from_its_meta(meta, size):
    assert plan.dataset_size(meta) == size


def test_dataset_size_refuses_a_meta_without_counts():
    with pytest.raises(ValueError, match="states no window count"):
        plan.dataset_size({"source": "test"})


def _target_with_dataset(tmp_path, name, meta) -> Path:
    storage = tmp_path / "storage"
    (storage / "datasets" / name).mkdir(parents=True)
    (storage / "datasets" / name / "meta.json").write_text(json.dumps(meta))
    target = tmp_path / "target.json"
    target.write_text(json.dumps({
        "cloud": "local", "hosts": ["127.0.0.1"], "sshUser": "me", "storageUri": f"file://{storage}",
        "registry": "", "imageRepository": "glucose-training", "vmSize": "local", "gpuCount": 0,
        "hourlyPriceUsd": 0, "spot": False,
    }))  # fmt: skip
    return target


def test_fab_plan_dataset_uses_the_real_window_count_of_a_prepared_set(tmp_path):
    meta = {"source": "vitaldb", "windows": 612_345, "window_length": 100, "cases": [1, 2]}
    target = _target_with_dataset(tmp_path, "vitaldb-m1", meta)
    args = ("--dataset", "vitaldb-m1", "--epochs", "10", "--target", str(target), "--json")
    done = _fab("plan", *args)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["request"]["windows"] == 612_345
    assert result["request"]["dataset"] == "vitaldb-m1"
    assert "612,345 windows counted in dataset vitaldb-m1" in result["notes"]


def test_fab_plan_dataset_that_is_not_there_is_one_line(tmp_path):
    target = _target_with_dataset(tmp_path, "other", {"windows": 1, "window_length": 100})
    done = _fab("plan", "--dataset", "missing", "--epochs", "1", "--target", str(target))
    assert done.returncode == 1
    assert "--dataset missing:" in done.stderr and "fab prepare-data" in done.stderr
    assert "Traceback" not in done.stderr


def test_fab_plan_dataset_excludes_windows_and_milestone():
    done = _fab("plan", "--dataset", "x", "--milestone", "M1", "--epochs", "1")
    assert done.returncode == 1
    assert "--dataset counts the windows itself" in done.stderr


def test_fab_plan_starts_without_importing_torch():
    probe = "import sys, ops.tasks, ops.plan; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr


def test_an_unmeasured_gpu_is_estimated_at_the_share_of_peak_measured_gpus_sustained():
    # An A100 measured at 25% of its 312 TFLOP/s bf16 peak; the H100 has no row.
    a100_windows_per_s = 0.25 * 312e12 / workload.train_flops_per_window(100)
    rows = (_measured("NVIDIA A100-SXM4-80GB", a100_windows_per_s),)
    h100 = catalog.GPUS["H100 80GB"]
    est = throughput.throughput(h100, 1, 100, rows)
    assert est.source == "estimated" and "25% of bf16 peak (as 1 measured GPU" in est.detail
    expected = 0.25 * h100.bf16_tflops * 1e12 / workload.train_flops_per_window(100)
    assert est.windows_per_s == pytest.approx(expected)


def test_the_fitted_share_is_the_median_over_measured_gpus_newest_row_each():
    flops = workload.train_flops_per_window(100)
    rows = (
        _measured("A10G", 0.9 * 70e12 / flops, date="2026-01-01"),  # replaced by the next
        _measured("A10G", 0.10 * 70e12 / flops, date="2026-02-01"),
        _measured("NVIDIA A100 80GB PCIe", 0.20 * 312e12 / flops),
        _measured("NVIDIA L4", 0.30 * 121e12 / flops),
        _measured("cpu", 500, precision="fp32"),  # not a GPU of the catalog
    )
    fraction, gpus = throughput.fitted_peak_fraction(rows, 100)
    assert gpus == 3 and fraction == pytest.approx(0.20)


# --- fab plan --sweep N: trials one GPU each -----------------------------------------

# Four A10Gs on one box (the per-GPU measurement above: 10k windows/s).
A10G_X4 = VmSize("test.a10g.x4", "aws", "A10G", 4, 96, 48, 192, 6.0, 2.0, "us-east-1",
                 ("us-east-1",), gpu_link="PCIe 4.0")  # fmt: skip


def _sweep_plan(trials: int):
    request = plan.PlanRequest(windows=1_000_000, epochs=36, sweep_trials=trials)
    return plan.make_plan(request, (*FIXED_CATALOG, A10G_X4), measured=MEASURED)


def test_a_sweep_on_one_gpu_runs_its_trials_one_after_another():
    # 8 trials x 1 h (36M window-passes at 10k/s), plus setup once.
    assert _row(_sweep_plan(8), "Test_T4").hours == pytest.approx(8.0 + plan.SETUP_HOURS)


def test_a_sweep_on_four_gpus_runs_four_trials_at_once_each_on_one_gpu():
    row = _row(_sweep_plan(8), "test.a10g.x4")
    assert row.hours == pytest.approx(2 * 1.0 + plan.SETUP_HOURS)
    assert row.windows_per_s == pytest.approx(10_000)
    assert row.on_demand_usd == pytest.approx(row.hours * 6.0)


def test_a_sweeps_storage_keeps_every_trials_checkpoints():
    one, eight = (plan.storage_egress_usd("aws", 1_000_000, 100, runs) for runs in (1, 8))
    results_gb = 3 * 7_218_753 * 12 / 1e9 + 0.05
    assert eight - one == pytest.approx(7 * results_gb * 0.023)


def test_fab_plan_sweep_prices_the_trials_on_every_size_and_says_how():
    done = _fab("plan", "--milestone", "M2", "--epochs", "20", "--sweep", "8", "--explain")
    assert done.returncode == 0, done.stderr
    assert "a sweep of 8 trials, each 2,400,000 windows x 20 epochs" in done.stdout
    assert "Two trials sharing one GPU is not assumed" in " ".join(done.stdout.split())


# Issue 46: a size no reference prices, and one whose regions no snapshot lists.
UNPRICED = VmSize("Test_H200", "azure", "H200 141GB", 1, 141, 24, 220, None, None, "eastus",
                  ("eastus",), price_date="2026-11-29", price_source="looked for in X")  # fmt: skip
NOWHERE_KNOWN = VmSize("test.h200", "aws", "H200 141GB", 1, 141, 24, 220, 9.0, None,
                       "us-east-1")  # fmt: skip


def test_an_unpriced_size_is_planned_in_hours_only_after_every_priced_one():
    request = plan.PlanRequest(windows=1_000_000, epochs=36)
    result = plan.make_plan(request, (*FIXED_CATALOG, UNPRICED), measured=MEASURED)
    last = result.rows[-1]
    assert last.size == "Test_H200" and last.hours > 0 and not last.pick
    assert (last.on_demand_usd, last.total_usd, last.usd_per_million_window_passes) == (
        None, None, None,
    )  # fmt: skip
    assert result.unpriced == ("Test_H200: no on-demand price (2026-11-29: looked for in X)",)
    assert "2026-11-29" not in result.snapshot_dates  # no price of that date is used


def test_a_deadline_only_the_unpriced_size_meets_marks_nothing():
    request = plan.PlanRequest(windows=1_000_000, epochs=36, deadline_hours=0.3)
    fast = VmSize("Test_H200", "azure", "H200 141GB", 8, 141, 96, 1850, None, None, "eastus",
                  ("eastus",), gpu_link="NVLink 4")  # fmt: skip
    result = plan.make_plan(request, (T4, fast), measured=MEASURED)
    assert not any(r.pick for r in result.rows)


def test_a_region_filter_names_the_sizes_no_snapshot_says_are_sold_there():
    assert not NOWHERE_KNOWN.regions_known
    request = plan.PlanRequest(windows=1_000_000, epochs=36, region="us-east-1")
    result = plan.make_plan(request, (A10G, NOWHERE_KNOWN), measured=MEASURED)
    assert [r.size for r in result.rows] == ["test.a10g"]
    assert any(n.startswith("not shown in us-east-1: test.h200") for n in result.notes)


def test_fab_plan_says_each_prices_dated_source_and_why_a_size_has_none():
    done = _fab("plan", "--milestone", "M1", "--epochs", "1", "--explain")
    assert done.returncode == 0, done.stderr
    footer = " ".join(done.stdout.split())  # rich wraps long lines
    assert "p5en.48xlarge 2026-08-06: https://github.com/dstackai/dstack/pull/4110" in footer
    assert "Standard_ND96isr_H100_v5 2026-11-09: https://raw.githubusercontent.com/" in footer
    assert f"aws {catalog.lookup('g5.xlarge', 'aws').price_date}: AWS's public EC2" in footer
    assert "No price (hours only, listed last): " in footer
    assert "p5e.48xlarge: no on-demand price (2026-11-29: the AWS Price List" in footer
    assert "Standard_ND96isr_H200_v5: no on-demand price (2026-11-29: no offline" in footer
