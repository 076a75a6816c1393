"""Naming workloads: what a cgroup path says, runtime state, PIDs, device names."""
