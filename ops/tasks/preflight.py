"""`fab preflight`: before `pulumi up`, ask the cloud whether it will work, and what to fix.

The checks live in `ops.preflight` (and one module per cloud); this task picks the
stack, prints every finding and exits non-zero when `pulumi up` would fail.
"""

from __future__ import annotations

from pathlib import Path

from invoke.exceptions import Exit

from ops.preflight import checks
from ops.tasks.flags import task


@task(
    help={
        "stack": "Pulumi stack to check (default: the selected stack)",
        "config-file": "check this Pulumi.<stack>.yaml instead of asking the pulumi CLI",
    }
)
def preflight(c, stack="", config_file=""):
    """Check quota, providers and permissions before `pulumi up`."""
    if config_file:
        settings = checks.settings_from_file(Path(config_file))
    else:
        settings = checks.settings_from_pulumi(stack or None)
    findings = checks.run(settings)
    report = findings.render(f"stack {settings.stack}")
    if findings.problems:
        raise Exit(report, code=1)
    print(report)
