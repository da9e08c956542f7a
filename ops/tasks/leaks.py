"""`fab leaks`: after `pulumi destroy`, prove nothing of the stack still bills.

Lists what the cloud still holds under the stack's `cost-scope` tag (and, on Azure, in
its tagged resource groups): instances or VMs in any state but gone, live spot requests,
volumes or disks, snapshots, public addresses, network interfaces, each with what it
bills. Needs no stack outputs: the stack's name, cloud and region come from its
`Pulumi.<stack>.yaml` (ops/leaks/scope.py). Exit 0: nothing left; 1: something left;
2: the cloud could not be asked or did not answer in time, so nothing is proven.
"""

from __future__ import annotations

from invoke.exceptions import Exit

from ops.leaks import aws, azure
from ops.leaks.found import LeakCheckError, report, within
from ops.leaks.scope import scope_of, settings
from ops.tasks.flags import task

# The whole search, every page and retry of it: a cloud that stops answering fails the
# check (exit 2) instead of holding it.
SEARCH_SECONDS = 180
LEFT_OVER, UNPROVEN = 1, 2
FINDERS = {"aws": aws.find, "azure": azure.find}


@task(
    help={
        "stack": "the stack whose leftovers to list: reads Pulumi.<stack>.yaml beside "
        "Pulumi.yaml for its cloud and region, so it works after `pulumi destroy` "
        "(default: the selected stack, asked of the pulumi CLI)",
        "config-file": "read this Pulumi.<stack>.yaml instead (the stack is named after it)",
        "region": "look in this region instead of the stack file's",
    }
)
def leaks(c, stack="", config_file="", region=""):
    """List what still bills under the stack after `pulumi destroy` (exit 1 if anything)."""
    scope = scope_of(settings(stack, config_file), region)
    try:
        found = within(SEARCH_SECONDS, lambda: FINDERS[scope.cloud](scope), scope.cloud)
    except LeakCheckError as error:
        raise Exit(f"fab leaks: {error}; nothing is proven, run it again", code=UNPROVEN) from None
    print("\n".join(report(scope.where(), found)))
    if found:
        raise Exit(
            f"fab leaks: {len(found)} of the stack's things still bill; delete them (`pulumi "
            "destroy` again if the stack still knows them, else the cloud's console), then "
            "run `fab leaks` again",
            code=LEFT_OVER,
        )
