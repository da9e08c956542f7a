"""Benchmarks: `train_step` (`bench`: pipeline and training step against a
seeds-style baseline), `noise_scale` (`bench --noise-scale`: the gradient noise scale
at a run's checkpoints), `checkpoint` (`bench-checkpoint`), `prepare`
(`bench-prepare`: VitalDB preparation), and `throughput_record`, the CSV `fab plan`
reads. Torch-free here: `ops` imports `throughput_record`."""
