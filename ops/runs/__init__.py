"""What reads runs, from the stack's storage and the local `runs/`, box or no box:
`records` (one run's files as a row), `listing` and `filters` (`fab runs`), `readable`
(numbers as a person reads them), `stored_log` (a run's log after its container, by
ranged reads) and `log_lines` (a log's lines, made safe and cut, live or stored),
`hparams`, `run_cache` and `board` (every run in one TensorBoard)."""
