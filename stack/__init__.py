"""The stack's schema: what the Pulumi program and `fab` both read about a stack.

Config keys and their validation (`config`), the VM catalog (`catalog`), GPU quotas
(`quota`), Azure's time-zone ids (`time_zones`), ARM reads (`arm`) and the spot-request
cleanup (`spot_requests`). Standard library only (cloud SDKs are the callers'), and it
imports neither `pulumi/` nor `ops/`: both import it.
"""
