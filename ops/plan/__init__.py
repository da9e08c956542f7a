"""`fab plan`, what a run costs before it starts: `pricing` (hourly prices: the catalog's
snapshot or live), `throughput` (windows/s per GPU: measured, else estimated), `estimate`
(hours and dollars on every size), `render` (the table)."""
