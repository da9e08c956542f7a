"""What runs inside the image: `python -m trainer <command>` (`trainer.__main__`).

The packages follow a run: `data` (a dataset dir, the batch pipeline, `synth`,
VitalDB) -> `model` -> `loop` (`train`: device, data parallelism, stop signals, how a run ends)
-> `checkpoints` (save, resume, upload) over `storage` (file://, s3://, az://) ->
`reports` (progress, status.json, evaluation, report.md) with `metrics`. `bench`
measures them. `config` (every typed config, `UserError`), `exit_codes`,
`container_env` and `atomic_write` serve them all.
"""
