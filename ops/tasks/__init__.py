"""The `fab` task collection: one module per concern; `fab -l` lists them."""

from invoke import Collection

from ops.tasks import plan

namespace = Collection(plan.plan)
