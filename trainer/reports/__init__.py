"""What a run shows and leaves behind: `progress` (console, metrics.jsonl,
TensorBoard), `status` (status.json, the heartbeat `fab status` and the box read),
`evaluate` (predictions and `trainer.metrics` for a split) and `report` (report.md
and its plots)."""
