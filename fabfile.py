"""`fab` entry point: the tasks live in `ops.tasks`, one module per concern."""

import sys

from fabric.main import program

from ops.tasks import namespace  # Fabric looks for `namespace`
from ops.tasks.flags import refuse_task_flags_before_the_task

# Fabric reads fab's own flags before it loads this file, and a task's only after it.
refuse_task_flags_before_the_task(sys.argv[1:], namespace, program.core_args())
