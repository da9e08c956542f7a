"""Training reports name their data: source, case count and dataset fingerprint, so a
synthetic result can never be quoted as a real one."""

import json

from trainer.data.dataset import load_dataset


def test_summary_names_the_source_cases_and_fingerprint_of_the_data(trained_run, tiny_data):
    data = json.loads((trained_run / "summary.json").read_text())["data"]
    dataset = load_dataset(tiny_data)
    assert data == {
        "source": "synth",
        "cases": int(dataset.cases.size),
        "windows": int(dataset.windows.shape[0]),
        "fingerprint": dataset.fingerprint,
    }


def test_report_says_the_data_is_synthetic_with_its_fingerprint(trained_run, tiny_data):
    report = (trained_run / "report.md").read_text()
    line = next(line for line in report.splitlines() if line.startswith("Data: "))
    assert line.startswith("Data: **synth** (synthetic waveforms: not a result on real patients)")
    assert load_dataset(tiny_data).fingerprint[:16] in line
