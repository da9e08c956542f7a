"""Which guard rails a target's boxes have, said where they have none.

A box `pulumi up` made has them all (docs/guard-rails.md). This machine and a lab box
have none: no idle watchdog, no daily stop, no budget, and no resume unit, because no
cloud-init installed the box programs and no cloud bills them. `fab train` and `fab
status` say so, once each, so nobody takes silence for protection.
"""

from __future__ import annotations

from ops.target.schema import Target

RESUME = "and nothing restarts a run that stopped: `fab train --run ID` resumes it"
THIS_MACHINE_BILLS = "this machine bills nothing"
"""The one wording of a local run's cost: `fab status`'s $0.00 and the guard rails'."""


def unbilled_note(target: Target) -> str | None:
    """Why a run on `target`'s boxes costs $0.00, as `fab status` and `fab runs` count
    it; None where the target has a price (a stack's boxes, a priced target file)."""
    if target.set_up_by_cloud_init or target.hourly_price_usd > 0:
        return None
    if target.this_machine:
        return THIS_MACHINE_BILLS
    return f"no hourlyPriceUsd in {target.source}"


def none_note(target: Target) -> str | None:
    """The line that says the target's boxes have no guard rails; None where they do."""
    if target.set_up_by_cloud_init:
        return None
    if target.this_machine:
        return (
            "none on this machine: no idle watchdog, daily stop or budget "
            f"({THIS_MACHINE_BILLS}), {RESUME}"
        )
    return (
        f"none on this lab box ({target.source}): no idle watchdog, daily stop or budget "
        f"(`pulumi up` did not make it: no bill `fab` knows of), {RESUME}"
    )
