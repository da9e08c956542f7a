"""What runs on the VM, outside the container: the box programs, and their packer.

The programs (watchdog, resume unit, stop records, their systemd units and
`setup-box.sh`) are installed flat in /opt/glucose-training and run there by the box's
own python3: standard library only, Python 3.10+ (`contract.MIN_PYTHON`; install.py
refuses an older one), each importing its siblings by bare name (`import docker_cli`).
The packer (`cloud_init`, `box_files`) runs where `pulumi up` and `fab` run and is not
installed; the Pulumi program and `fab box-update` both render a box's files through it.
"""
