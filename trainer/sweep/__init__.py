"""A search over `train` flags that runs on the box by itself (`python -m trainer sweep`):
`space` (the flags a sweep may vary and how a range is written), `spec` (the sweep's
folder and what `fab sweep` writes there), `trials` (each trial a `train` process with
its own run dir), `driver` (the Optuna study, the queue, stop and resume), `selection`
(the chosen trial, its test split evaluated once, the report) and `plot` (validation
MAE against each swept value)."""
