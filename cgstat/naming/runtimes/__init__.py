"""Container names, images and labels from the container runtimes' own state.

One module per runtime's state (docker, cri for containerd and CRI-O, podman, kubelet),
the trust rules every read follows (trust), the Docker socket client (dockerapi), and the
per-ID cache that decides what to look up and fills records (identities.Identities).
"""
