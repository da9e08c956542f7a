"""Runs on the box: `launch` (what `fab train` does there), `container` and `distributed`
(the `docker run` and torchrun lines), `env_files`, `deadline` (when the cloud stops
the boxes), `look` and `status` (`fab status`), `stop` (`fab stop`), `sweep`, `on_box`,
`names`, `records` and `listing` (`fab runs`)."""
