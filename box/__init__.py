"""What runs on the VM, outside the container: the box programs, as one package.

The programs (watchdog, resume unit, stop records, their systemd units and
`setup-box.sh`) are installed as this package in /opt/glucose-training/current/box and
run there by the box's own python3 (`python3 -m box.watchdog` from the release):
standard library only, Python 3.10+ (`contract.MIN_PYTHON`; install.py refuses an older
one). `bootstrap` alone travels in the user data and imports nothing of ours. The packer
(`stack/box_packing.py`, `stack/cloud_init.py`) runs where `pulumi up` and `fab` run.
"""
