"""The box itself: `boxes` (each box a target names, of its kind), `ssh` (a box over SSH),
`lab_box` (a box `pulumi up` did not make), `this_machine` (the local target, no SSH),
`lease` (keeping the idle watchdog off for a while), `update` (`fab box-update`)."""
