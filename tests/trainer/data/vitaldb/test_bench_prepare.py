"""`python -m trainer bench-prepare --json`: one JSON line with the figures the docs
quote (not a timing test: the numbers are whatever this machine gives)."""

import json

from trainer.__main__ import main


def test_bench_prepare_prints_one_json_line_with_rates_memory_and_the_m3_projection(capsys):
    assert (
        main(["bench-prepare", "--cases", "2", "--minutes", "2", "--workers", "1", "--json"]) == 0
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result["cases"] == 2 and result["windows"] > 0
    assert result["cases_per_min"] > 0 and result["windows_per_s"] > 0
    assert result["peak_rss_mib"] > 0
    assert result["projected_m3_hours_on_4_cores"] > 0
