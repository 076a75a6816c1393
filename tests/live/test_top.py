"""cgstat top in a real terminal (tmux) on a real burner at half a core."""

import re
import statistics
import sys

import pytest

from tests.unit.test_top import REPO, Tmux, _top_code


def _rows(screen):
    """name -> cells of the table rows on screen (in order)."""
    out = []
    for line in screen.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if cells and cells[0].startswith("/cgstat-test-"):
            out.append(cells)
    return out


def _name_of(g):
    return g.cgroup  # a test group is neither a container nor a unit: named by its cgroup


@pytest.mark.realcg
def test_top_in_tmux_burner_at_half_a_core_sort_keys_and_q(make_group, workload_bin, tmp_path):
    burner = make_group()
    burner.set_cpu_quota(50000, 100000)
    holder = make_group()
    burner.start([workload_bin, "spin"]).wait_line("ready")
    holder.start([workload_bin, "hold", "64"]).wait_line("ready")
    b, h = _name_of(burner), _name_of(holder)
    match = "%s$|%s$" % (re.escape(burner.name), re.escape(holder.name))
    code = _top_code("match=%r" % match, 1.0)
    tm = Tmux(tmp_path)
    try:
        tm.start(["env", "PYTHONPATH=" + REPO, sys.executable, "-c", code])
        tm.wait(lambda s: "sort: cpu" in s and len(_rows(s)) == 2, "both groups on screen")

        # CPU % of the burner over successive screens (the first, a 0.5 s warm-up, is skipped)
        readings = []
        seen = set()

        def burner_cpu(screen):
            title = screen.splitlines()[0] if screen else ""
            for cells in _rows(screen):
                if cells[0] == b and cells[2].endswith("%") and (title, cells[2]) not in seen:
                    assert cells[1] == "--"  # CONTAINER ID: a plain cgroup is no container
                    seen.add((title, cells[2]))
                    readings.append(float(cells[2].rstrip("%")))
                    assert cells[3] == "50%"  # the limit, on the CPU % scale
            return len(readings) >= 5

        tm.wait(burner_cpu, "five screens with the burner's CPU %", timeout=40)
        cpu = statistics.median(readings[1:])
        assert 45.0 <= cpu <= 55.0, readings

        # sorted by CPU: the burner first; m: the 64 MiB holder first; n: by name
        assert [c[0] for c in _rows(tm.screen())] == [b, h]
        tm.keys("m")
        tm.wait(lambda s: "sort: memory" in s and [c[0] for c in _rows(s)] == [h, b], "memory order")
        tm.keys("n")
        tm.wait(lambda s: "sort: name" in s and [c[0] for c in _rows(s)] == sorted([b, h], key=str.lower),
                "name order")
        tm.keys("c")
        tm.wait(lambda s: "sort: cpu" in s and [c[0] for c in _rows(s)] == [b, h], "cpu order again")
        tm.keys("q")
        assert tm.rc() == 0
    finally:
        tm.close()

