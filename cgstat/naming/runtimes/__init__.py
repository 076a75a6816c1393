"""Container names, images and labels from the container runtimes' own state.

What a runtime is (runtime.py: the paths it makes, how it names from its state, whose
state it trusts); one module each (docker.py, containerd.py, crio.py, podman.py, lxc.py,
slurm.py) with the state formats they share (cri.py: OCI specs' CRI annotations; storage.py:
containers/storage); the lookup order in one place (registry.py); the kubelet's log
folders (kubelet.py); the trust rules every read follows (trust.py); where the daemons
keep their state (daemons.py); the Docker socket client (dockerapi.py); and the per-ID
cache that decides what to look up and fills records (identities.Identities).
"""
