"""What runs inside the image: `python -m trainer <command>` (`trainer.__main__`).

The packages follow a run: `data` (a dataset dir, the batch pipeline, `synth`,
VitalDB) -> `model` -> `loop` (`train`: device, data parallelism, stop signals, how a run ends)
-> `checkpoints` (save, resume, upload) over `storage` (file://, s3://, az://) ->
`reports` (progress, status.json, evaluation, report.md) with `metrics`. `bench`
measures them. `commands` (each subcommand's config), `flags` (the command line made
from config fields), `config` (every typed config, `UserError`), `exit_codes`,
`container_env` and `atomic_write` serve them all; the run dir's names and records are
the box's contract (`box.contract`, which the image ships beside `trainer/`).
"""
