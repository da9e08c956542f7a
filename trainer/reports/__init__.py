"""What a run shows and leaves behind: `progress` (console, metrics.jsonl,
TensorBoard), `status` (status.json, the heartbeat `fab status` and the box read),
`summary` (summary.json), `report` (report.md and its plots, `settings` its table of
flags) and `cost` (the boxes' up time in dollars). The
predictions and metrics of a split are `trainer.loop.evaluate`'s."""
