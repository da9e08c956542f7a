"""`fab` entry point: the tasks live in `ops.tasks`, one module per concern."""

from ops.tasks import namespace  # noqa: F401  (Fabric looks for `namespace`)
