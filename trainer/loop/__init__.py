"""The training loop: `train` reads top to bottom; `device` picks the device and
precision, `distributed` the process group under torchrun (`rank_outputs` for ranks
other than 0), `preemption` and `spot_notice` turn signals and spot notices into a
stop, and `run_ending` is every way out of a run."""
