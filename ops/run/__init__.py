"""Runs on the box: `launch` (what `fab train` does, step by step), `sweep` (what `fab
sweep` does), `prepare` (what `fab prepare-data` does), `container` and `distributed`
(the `docker run` and torchrun lines), `env_files`, `deadline` (when the cloud stops
the boxes), `look` and `status` (`fab status`), `stop` (`fab stop`), `end_watch`,
`on_box` (what the box has), `names`."""
