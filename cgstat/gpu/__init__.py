"""GPU figures from NVML: the one gateway to the driver library (nvml.py) and a snapshot per tick (sample.py)."""
