"""The guest stage: cgstat live on pure cgroup v2 under systemd, in Debian guests under qemu.

* image.py - the guest image (mmdebstrap, cached per recipe, ext4 via mke2fs -d);
* vm.py    - one booted guest: qemu, the agent's channel, cgstat installed from the host's
             wheel, commands and pytest selections run in it, logs kept on failure;
* agent.py - the guest's half of the channel (baked into the image);
* conftest.py - the ``guest`` fixture (one guest per suite for the session);
* test_*.py - the live checks, run here on the host, each driving the guest.

Run alone: ``.venv/bin/python -m pytest tests/guest`` (as root, with qemu-system-x86,
mmdebstrap and e2fsprogs; docs/development.md "The guest stage"). Skip: ``CGSTAT_GUEST=0``.
"""
