"""GPU figures from NVML: the one gateway to the driver library (nvml.py; device reads, direct
per-tick calls, XIDs and GPM in nvml_device, nvml_direct, nvml_xid, nvml_gpm) and a snapshot per
tick (sample.py)."""
