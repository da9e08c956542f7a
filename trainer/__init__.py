"""What runs inside the image: `python -m trainer synth|train|evaluate|bench`."""
