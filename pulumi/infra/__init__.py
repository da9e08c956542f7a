"""The Pulumi program's components: stack config, one training box per cloud, cloud-init.

Lives inside pulumi/ as a package (pulumi/ itself deliberately has no `__init__.py`: it
would shadow the `pulumi` SDK). Cloud SDKs are imported by the cloud modules alone, so a stack
for one cloud never needs the other's provider.
"""
