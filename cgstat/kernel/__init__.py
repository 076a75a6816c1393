"""Reading the kernel: the host root, cgroup layouts and trees, cgroup files, /proc."""
