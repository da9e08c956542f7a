"""Ops' one door to the clouds' control planes, with your credentials: the boxes' power
(running, starting, stopped and by what; `fab start`) and the run's hard stop.

One module per cloud with the same verbs; `power` holds the shared shape (a box's power
states), `api` picks the module. boto3 and azure-identity are imported only for the
cloud in use. A box no cloud knows of (a target file without `boxIds`) has no power to
ask about.
"""
