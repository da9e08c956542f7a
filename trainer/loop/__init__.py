"""The training loop: `train` reads top to bottom over `run` (the run built from its
config and resumed: data, model, optimizer, schedule, `Position`); `defaults` holds what
a run leaves to the trainer (global batch, learning rate, formulation), `formulation`
times which way of computing the network is fastest, `device` picks the device and
precision, `distributed` the process group under torchrun (`rank_outputs` for ranks
other than 0), `preemption` and `spot_notice` turn signals and spot notices into a stop,
`run_ending` is every way out of a run, `evaluate` the predictions and metrics of a
split, and `launcher` is torchrun in the container."""
