"""The boxes' power, from the cloud's own API with your credentials: running, starting,
stopped (and by what); and starting them (`fab start`).

One module per cloud with the same verbs (`states`, `start`); `state` holds the shared
shape and picks the module. boto3 and azure-identity are imported only for the cloud in
use. A box no cloud knows of (a target file without `boxIds`) has no power to ask about.
"""
