"""VitalDB -> the trainer's dataset format (`python -m trainer prepare-vitaldb`).

The flow, one module per step: `prepare` resolves the cases and runs them (resumably,
in worker processes); per case, `case_file` reads the PLETH track of a `.vital` file,
`waveform` band-passes, resamples, windows and judges its quality, `labels` gives each
window a glucose value from `lab_table`'s draws; `assemble` streams the per-case
shards into the dataset files. `opendata` fetches cases and tables over HTTP;
`synthetic_case` writes `.vital` files for the benchmark and the tests.
"""
