"""`cloud: azure`: the training box component and its parts, one module each."""
