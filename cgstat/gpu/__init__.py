"""GPU figures from NVML: the one gateway to the driver library (nvml.py; the call wrapper and
what an error costs in nvml_calls; device reads, direct per-tick calls, XIDs and GPM in
nvml_device, nvml_direct, nvml_xid, nvml_gpm), a reading per tick (reading.py), made beside
the tick with a deadline in the long runs (beside.py)."""
