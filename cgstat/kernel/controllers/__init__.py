"""One module per cgroup controller's files (cpu, memory, io, pids, pressure), read for one
cgroup through files.FileReader; kernel/cgroups.py puts them together into a Sample.
"""
