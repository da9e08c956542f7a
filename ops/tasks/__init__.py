"""The `fab` task collection: one module per concern; `fab -l` lists them."""

from invoke import Collection

from ops.tasks import (
    access,
    box,
    image,
    leaks,
    plan,
    power,
    preflight,
    prepare,
    run,
    runs,
    sweep,
    transfer,
)

namespace = Collection(
    image.build,
    image.push,
    run.train,
    run.logs,
    run.status,
    run.stop,
    run.hold,
    runs.runs,
    sweep.sweep,
    transfer.download,
    transfer.upload_data,
    prepare.prepare_data,
    plan.plan,
    preflight.preflight,
    leaks.leaks,
    box.box_update,
    power.start,
    access.tensorboard,
    access.ssh,
)
