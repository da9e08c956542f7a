"""Datasets: `dataset` loads and checks a dataset dir and splits it by case,
`pipeline` turns a split into the on-device tensor the loop indexes; `synth` and
`vitaldb` write dataset dirs (synthetic, and from VitalDB recordings)."""
