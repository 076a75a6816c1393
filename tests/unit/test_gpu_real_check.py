"""bench/gpu_real_check.sh and its comparison (bench/gpu_real_compare.py), without a GPU: no
driver (it says so and exits 2), and the whole script against the NVML double with a
stand-in `nvidia-smi` that answers what the scenario holds (it agrees, exit 0) or one
figure off (a mismatch, exit 1). On a real GPU the script is run by hand (docs/gpu.md)."""

import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import nvmldouble as D
from tests.helpers.contract import ROOT

sys.path.insert(0, os.path.join(ROOT, "bench"))
import gpu_real_compare as C  # noqa: E402

SCRIPT = os.path.join(ROOT, "bench", "gpu_real_check.sh")
GiB = 1 << 30
U0 = "GPU-real0000-0000-0000-0000-000000000000"
needs_cc = pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")), reason="no C compiler for the double")


def _fake_smi(folder, gpu_line, apps_lines, list_rc=0, pmon=""):
    """An nvidia-smi that answers -L, the two queries and pmon with these lines."""
    path = os.path.join(folder, "nvidia-smi")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n"
                "case \"$*\" in\n"
                "  -L) echo 'GPU 0: NVIDIA H200 (UUID: %s)'; exit %d ;;\n"
                "  *--query-gpu=*) echo '%s' ;;\n"
                "  *--query-compute-apps=pid\\ *|*--query-compute-apps=pid,gpu_uuid*) printf '%s' ;;\n"
                "  *--query-compute-apps=pid*) printf '%s' ;;\n"
                "  pmon*) printf '%s' ;;\n"
                "esac\n" % (U0, list_rc, gpu_line, "".join(a + "\\n" for a in apps_lines),
                            "".join(a.split(",")[0] + "\\n" for a in apps_lines), pmon.replace("%", "%%").replace("\n", "\\n")))
    os.chmod(path, 0o755)
    return folder


def _run(env, timeout=200):
    return subprocess.run(["bash", SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _path_without_nvidia_smi():
    return os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if not os.path.exists(os.path.join(p, "nvidia-smi")))


def test_without_a_driver_it_says_so_and_exits_2():
    proc = _run(dict(os.environ, PATH=_path_without_nvidia_smi()))
    assert proc.returncode == 2
    assert "no nvidia-smi here: this check needs an NVIDIA driver (not run)" in proc.stderr


def test_a_driver_that_does_not_answer_exits_2(tmp_path):
    bin_dir = _fake_smi(str(tmp_path), "", [], list_rc=9)
    proc = _run(dict(os.environ, PATH=bin_dir + os.pathsep + _path_without_nvidia_smi()))
    assert proc.returncode == 2 and "cannot talk to the driver" in proc.stderr


def _scenario(pid):
    return (D.Scenario().gpu(0, uuid=U0, name="NVIDIA H200", mem_total=141 * GiB, mem_used=9 * GiB,
                             mem_reserved=GiB // 2, util_gpu=87, temp=51, power_mw=412000, sm_clock=1755,
                             mem_clock=2619, sm_clock_max=1980, mem_clock_max=2619, power_limit_mw=700000,
                             bus_id="00000000:1B:00.0", serial="1654922013421", persistence=1, compute_mode=0)
            .proc(0, pid, 3 * GiB).sample(0, pid, sm=40, mem=10))


# what nvidia-smi says of that scenario, in the order of C.FIELDS
SMI = ["0", U0, "NVIDIA H200", "00000000:1B:00.0", "1654922013421", "550.54.15", "Enabled", "Default",
       "144384", "1980", "2619", "700.00", "9216", "51", "412.00", "1755", "2619", "87"]


@needs_cc
def _pmon(pid, sm):
    return ("# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command \n"
            "# Idx           #    C/G      %      %      %      %      %      %    name \n"
            + "    0    {:7d}     C     {}     10      -      -      -      -    sleep\n".format(pid, sm))


@pytest.mark.parametrize("change, agrees, pmon_sm", [({}, True, "38"), ({"memory.total": "81920"}, False, "40"),
                                                     ({"temperature.gpu": "[N/A]"}, True, "-"),
                                                     ({}, False, "95")])
def test_the_script_against_the_double(tmp_path, change, agrees, pmon_sm):
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        scenario = D.write_scenario(tmp_path / "s.txt", _scenario(sleeper.pid))
        values = dict(zip((f for f, _, _ in C.FIELDS), SMI))
        values.update(change)
        line = ", ".join(values[f] for f, _, _ in C.FIELDS)
        bin_dir = _fake_smi(str(tmp_path), line, ["%d, %s, 3072" % (sleeper.pid, U0)],
                            pmon=_pmon(sleeper.pid, pmon_sm))
        env = D.env(scenario, "full")
        env.update(PATH=bin_dir + os.pathsep + _path_without_nvidia_smi(), OUT=str(tmp_path / "out"),
                   PYTHON=sys.executable, WORKLOAD="none")  # (nvcc may be here, a GPU is not)
        proc = _run(env)
    finally:
        sleeper.kill()
        sleeper.wait()
    out = proc.stdout
    assert "workload: none" in out, proc.stderr  # devices and the process already on the GPU
    assert "pid %-8d" % sleeper.pid in out
    if agrees:
        assert proc.returncode == 0, out + proc.stderr
        assert "all agree" in out
    elif pmon_sm == "95":  # SM % far from pmon's
        assert proc.returncode == 1, out + proc.stderr
        assert "cgstat SM 40 %, pmon 95.0 %" in out and "1 mismatch(es)" in out
    else:
        assert proc.returncode == 1, out + proc.stderr
        assert "memory.total" in out and "MISMATCH" in out and "1 mismatch(es)" in out


def test_pmon_parsed_by_its_header():
    assert C.parse_pmon(_pmon(4242, "37") + "    1          -     -      -      -      -      -      -      -    -\n") \
        == {(0, 4242): 37.0}
    old = "# gpu        pid  type    sm   mem   enc   dec   command\n# Idx          #   C/G     %     %     %     %   name\n" \
          "    0       4242     C     -     -     -     -   python\n"
    assert C.parse_pmon(old) == {(0, 4242): None}


@needs_cc
def test_the_ctypes_workload_says_why_it_cannot_run(tmp_path):
    """WORKLOAD=ctypes where libcuda.so.1 cannot be used (this machine): said, devices only."""
    bin_dir = _fake_smi(str(tmp_path), ", ".join(SMI), [])
    env = D.env(D.write_scenario(tmp_path / "s.txt", _scenario(1)), "full")
    env.update(PATH=bin_dir + os.pathsep + _path_without_nvidia_smi(), OUT=str(tmp_path / "out"),
               PYTHON=sys.executable, WORKLOAD="ctypes", SECONDS_BUSY="2")
    proc = _run(env)
    if "ctypes workload:" in proc.stderr:  # no libcuda.so.1, or no GPU for it
        assert "no CUDA workload possible here" in proc.stderr
        assert "workload: none" in proc.stdout


def _record(**gpu):
    base = {"index": 0, "uuid": U0, "name": "NVIDIA H200", "pci_bus_id": "00000000:1B:00.0", "serial": "x",
            "driver_version": "550.54.15", "persistence_mode": False, "compute_mode": "exclusive_process",
            "memory_total_bytes": 80 * GiB, "sm_clock_max_mhz": 1980, "memory_clock_max_mhz": 2619,
            "power_limit_watts": 700.0, "memory_used_bytes": 10 * GiB, "temperature_celsius": 60,
            "power_watts": 400.0, "sm_clock_mhz": 1700, "memory_clock_mhz": 2619, "utilization_percent": 50,
            "parent_uuid": None}
    base.update(gpu)
    return {U0: {"type": "gpu", "gpu": base, "processes": [{"pid": 7, "memory_bytes": 100 * (1 << 20),
                                                             "cgroup": "/docker/x", "container": {"name": "t"}}]}}


_LINE = "0, %s, NVIDIA H200, 00000000:1b:00.0, x, 550.54.15, Disabled, Exclusive_Process, 81920, 1980, 2619, " \
        "700.00, 10300, 61, 420.5, 1650, 2619, 70" % U0


def test_compare_tolerates_what_moves_and_judges_what_does_not():
    lines = []
    assert C.compare(_record(), _LINE, "7, %s, 104\n" % U0, workload_pid=7, out=lines.append) == []
    assert any("workload PID 7: cgroup /docker/x" in x for x in lines)
    # a fixed value off, a moving one far off, a process missing, the workload unattributed
    bad = C.compare(_record(serial="y", temperature_celsius=90), _LINE, "7, %s, 104\n8, %s, 5\n" % (U0, U0),
                    workload_pid=8, out=lambda s: None)
    assert [b.split(":")[0] for b in bad] == ["GPU %s serial" % U0, "GPU %s temperature.gpu" % U0,
                                              "process 8 on %s" % U0, "the workload (PID 8) is not in cgstat's GPU records"]


def test_compare_null_against_a_value_is_a_mismatch_and_na_is_not_judged():
    line = _LINE.replace("2619, 700.00", "2619, [N/A]")
    bad = C.compare(_record(sm_clock_mhz=None, power_limit_watts=None), line, "", out=lambda s: None)
    assert bad == ["GPU %s clocks.sm: cgstat None, nvidia-smi 1650" % U0]


@needs_cc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc here")
def test_the_nvcc_workload_builds_and_says_when_it_cannot_run(tmp_path):
    """Where nvcc is installed, the script's CUDA kernel compiles; without a GPU the CUDA
    runtime refuses it, and the script says so (exit 1) instead of comparing nothing."""
    bin_dir = _fake_smi(str(tmp_path), ", ".join(SMI), [])
    env = D.env(D.write_scenario(tmp_path / "s.txt", _scenario(1)), "full")
    env.update(PATH=bin_dir + os.pathsep + _path_without_nvidia_smi(), OUT=str(tmp_path / "out"),
               PYTHON=sys.executable, WORKLOAD="nvcc", SECONDS_BUSY="2")
    env["PATH"] += os.pathsep + os.path.dirname(shutil.which("nvcc"))
    proc = _run(env)
    assert os.access(tmp_path / "out" / "busy", os.X_OK), proc.stderr
    assert "workload: nvcc kernel" in proc.stderr
    if proc.returncode != 0:  # no GPU for the CUDA runtime (this machine)
        assert proc.returncode == 1 and "the workload exited" in proc.stderr


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas here")
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_the_ctypes_workloads_ptx_assembles(tmp_path, arch):
    """The kernel bench/gpu_cuda_workload.py hands the driver's JIT (cuModuleLoadData) is
    valid PTX for a Turing and a Hopper GPU, as CUDA's own assembler judges it."""
    import gpu_cuda_workload as W

    ptx = tmp_path / "spin.ptx"
    ptx.write_bytes(W.PTX)
    proc = subprocess.run(["ptxas", "-arch=" + arch, str(ptx), "-o", str(tmp_path / "spin.cubin")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "spin.cubin").stat().st_size > 0
