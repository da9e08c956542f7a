"""Run ids and dataset names as `fab` takes them: the box contract's rule, checked once.

A `--run` or `--dataset` becomes a container name, a path on the box and here, and a
word in remote shell lines, so anything else is refused before it is used.
"""

from __future__ import annotations

from invoke.exceptions import Exit

from box import contract


def checked_name(value: str, what: str, kind: str = "run id") -> str:
    """`value` when it is a usable `kind` (run id or dataset name); Exit naming `what`."""
    problem = contract.name_problem(value, what, kind)
    if problem:
        raise Exit(problem)
    return value
