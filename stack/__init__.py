"""The stack's schema: what the Pulumi program and `fab` both read about a stack.

Config keys and their validation (`config`, and `cloud_limits`: the checks the clouds'
references decide), the VM catalog (`catalog`) and which regions sell each size
(`offerings`, a dated snapshot that `refresh_offerings` rewrites), GPU quotas (`quota`),
time zones (`time_zones`: the tz database and CLDR's Windows ids), ARM reads (`arm`)
and the spot-request cleanup (`spot_requests`). The standard library and the two
time-zone packages (tzdata, tzlocal) only: cloud SDKs are the callers' (the refresh,
a maintainer's command, imports cfn-lint and botocore when it runs). It imports
neither `pulumi/` nor `ops/`: both import it.
"""
