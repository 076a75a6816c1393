"""What the tests share: real cgroups and containers (realcg), a private dockerd (realdocker), the
NVML double (nvmldouble), synthetic host roots (synth), a fake Docker API (fakedocker), the
record contract (contract), complete example records (fieldtable) and the check of what a run
leaves behind (leftovers, whose hooks tests/conftest.py imports)."""
