"""What runs on the VM, outside the container: the box programs, as one package.

The programs (watchdog, resume unit, stop records, their systemd units and
`setup-box.sh`) are installed as this package in /opt/glucose-training/current/box and
run there by the box's own python3 (`python3 -m box.watchdog` from the release):
standard library only, Python 3.10+ (`MIN_PYTHON`; install.py refuses an older one).
`bootstrap` alone travels in the user data and imports nothing of ours. The packer
(`stack/box_packing.py`, `stack/cloud_init.py`) runs where `pulumi up` and `fab` run.
"""

# Here, not in contract.py: contract's records resolve their annotations when they are
# defined (`list[dict] | None`), which an older python3 cannot even import, and
# install.py must refuse such a python3 in words before it imports anything else.
MIN_PYTHON = (3, 10)
"""The oldest python3 the box programs run on (they use zoneinfo, 3.9+, and `X | None`):
Ubuntu 22.04's, the oldest of the images the stacks boot (the AWS Deep Learning AMI and
plain Ubuntu 22.04, Azure's ubuntu-hpc 2204). install.py refuses an older one."""
