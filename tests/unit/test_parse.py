"""Table-driven parser tests: (file kind, content) -> value, and bad content -> ValueError."""

import pytest

from cgstat.kernel import parse

U64 = 2**64 - 1

GOOD = [
    (parse.parse_uint, "12345\n", 12345),
    (parse.parse_uint, "0", 0),
    (parse.parse_uint, f"{U64}\n", U64),
    (parse.parse_int, "-1\n", -1),
    (parse.parse_int, "50000", 50000),
    (parse.parse_max_or_uint, "max\n", None),
    (parse.parse_max_or_uint, "67108864\n", 67108864),
    (parse.parse_cpu_max, "max 100000\n", (None, 100000)),
    (parse.parse_cpu_max, "50000 100000\n", (50000, 100000)),
    (parse.parse_flat_keyed, "usage_usec 10\nuser_usec 7\nsystem_usec 3\n",
     {"usage_usec": 10, "user_usec": 7, "system_usec": 3}),
    (parse.parse_flat_keyed, "", {}),
    # one bad line maps its key to None and leaves the others alone
    (parse.parse_flat_keyed, "anon 5\ninactive_fi\n", {"anon": 5, "inactive_fi": None}),
    (parse.parse_flat_keyed, "anon ten\nfile 3\nnew_key 1 2\n", {"anon": None, "file": 3, "new_key": None}),
    (parse.parse_flat_keyed, "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
     {"oom_kill_disable": 0, "under_oom": 0, "oom_kill": 1}),
    (parse.parse_io_stat, "254:0 rbytes=8388608 wbytes=16777216 rios=8 wios=16 dbytes=0 dios=0\n",
     {"254:0": {"rbytes": 8388608, "wbytes": 16777216, "rios": 8, "wios": 16, "dbytes": 0, "dios": 0}}),
    (parse.parse_io_stat, "8:0\n259:1 rbytes=1 wbytes=2 rios=3 wios=4 newkey=5\n",
     {"8:0": {}, "259:1": {"rbytes": 1, "wbytes": 2, "rios": 3, "wios": 4, "newkey": 5}}),
    (parse.parse_io_stat, "", {}),
    (parse.parse_pressure,
     "some avg10=1.50 avg60=0.25 avg300=0.00 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n",
     {"some": {"avg10": 1.5, "avg60": 0.25, "avg300": 0.0, "total": 123456},
      "full": {"avg10": 0.0, "avg60": 0.0, "avg300": 0.0, "total": 7}}),
    (parse.parse_pressure, "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
     {"some": {"avg10": 0.0, "avg60": 0.0, "avg300": 0.0, "total": 0}}),
    (parse.parse_blkio_v1,
     "254:0 Read 8388608\n254:0 Write 16777216\n254:0 Sync 0\n254:0 Async 25165824\n254:0 Discard 0\n"
     "254:0 Total 25165824\nTotal 25165824\n",
     {"254:0": {"Read": 8388608, "Write": 16777216, "Sync": 0, "Async": 25165824, "Discard": 0}}),
    (parse.parse_blkio_v1, "Total 0\n", {}),
    (parse.parse_pid_list, "1\n23\n456\n", [1, 23, 456]),
    (parse.parse_pid_list, "", []),
    (parse.parse_proc_cgroup, "4:memory:/a/b\n2:cpu,cpuacct:/c\n1:name=systemd:/d\n0::/e:f\n",
     [("memory", "/a/b"), ("cpu,cpuacct", "/c"), ("name=systemd", "/d"), ("", "/e:f")]),
    (parse.parse_meminfo, "MemTotal:       24576000 kB\nHugePages_Total:       0\n",
     {"MemTotal": 24576000 * 1024, "HugePages_Total": 0}),
    (parse.parse_cpu_list, "0-3,8-11\n", 8),
    (parse.parse_cpu_list, "0\n", 1),
    (parse.parse_mountinfo,
     "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
     "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
     "50 31 0:40 / /mnt/with\\040space rw - tmpfs tmpfs rw\n",
     [("0:29", "/", "/sys/fs/cgroup/cpu", "cgroup", "rw,cpu"),
      ("0:38", "/", "/sys/fs/cgroup/unified", "cgroup2", "rw,nsdelegate"),
      ("0:40", "/", "/mnt/with space", "tmpfs", "rw")]),
]

BAD = [
    (parse.parse_uint, ""),
    (parse.parse_uint, "\n"),
    (parse.parse_uint, "-5"),
    (parse.parse_uint, "12a"),
    (parse.parse_uint, "1.5"),
    (parse.parse_uint, str(2**64)),
    (parse.parse_uint, "١٢٣"),  # non-ASCII digits are digits to str.isdigit, not to the kernel
    (parse.parse_uint, "\x00\xff"),
    (parse.parse_int, "--1"),
    (parse.parse_int, str(2**63)),
    (parse.parse_int, "max"),
    (parse.parse_max_or_uint, "maximum"),
    (parse.parse_max_or_uint, "-1"),
    (parse.parse_cpu_max, "50000 0"),
    (parse.parse_cpu_max, "a b"),
    (parse.parse_cpu_max, "1 2 3"),
    (parse.parse_cpu_max, ""),
    (parse.parse_flat_keyed, "usage_usec 10\nusage_usec 11\n"),
    (parse.parse_io_stat, "rbytes=1\n"),
    (parse.parse_io_stat, "254:0 rbytes\n"),
    (parse.parse_io_stat, "254:0 rbytes=1 rbytes=2\n"),
    (parse.parse_io_stat, "254:0 rbytes=-1\n"),
    (parse.parse_io_stat, "sda rbytes=1\n"),
    (parse.parse_io_stat, "254:0 rbytes=1\n254:0 rbytes=2\n"),
    (parse.parse_pressure, "some avg10=0.00 avg60=0.00 total=0\n"),
    (parse.parse_pressure, "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
    (parse.parse_pressure, "partial avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
    (parse.parse_pressure, "some avg10=x avg60=0.00 avg300=0.00 total=0\n"),
    (parse.parse_pressure, ""),
    (parse.parse_blkio_v1, "254:0 Read\n"),
    (parse.parse_blkio_v1, "254:0 Read x\n"),
    (parse.parse_blkio_v1, "vda Read 1\n"),
    (parse.parse_blkio_v1, ""),  # no closing Total: cut short
    (parse.parse_blkio_v1, "254:0 Read 1\n254:0 Write 2\n"),
    (parse.parse_blkio_v1, "Total 0\n254:0 Read 1\n"),
    (parse.parse_blkio_v1, "254:0 Read 1\n254:0 Read 2\n"),
    (parse.parse_pid_list, "1\nx\n"),
    (parse.parse_proc_cgroup, "memory:/a\n"),
    (parse.parse_proc_cgroup, "4:memory:relative\n"),
    (parse.parse_cpu_list, ""),
    (parse.parse_cpu_list, "3-1"),
    (parse.parse_mountinfo, "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime cgroup cgroup rw,cpu\n"),
]


@pytest.mark.parametrize("fn,text,expected", GOOD, ids=[f"{f.__name__}-{i}" for i, (f, _, _) in enumerate(GOOD)])
def test_good_content(fn, text, expected):
    assert fn(text) == expected


@pytest.mark.parametrize("fn,text", BAD, ids=[f"{f.__name__}-{i}" for i, (f, _) in enumerate(BAD)])
def test_bad_content_raises_value_error(fn, text):
    with pytest.raises(ValueError):
        fn(text)


def test_unlimited_sentinel_is_no_limit():
    assert parse.limit_bytes(9223372036854771712) is None  # v1, 4 KiB pages
    assert parse.limit_bytes(9223372036854710272) is None  # v1, 64 KiB pages
    assert parse.limit_bytes(199999488) == 199999488  # a real, page-rounded limit


def test_flat_keyed_only_some_keys():
    text = "cache 5\nrss 7\ntotal_rss 9\nmapped_file 0\n"
    assert parse.parse_flat_keyed(text, ("total_rss", "rss", "absent")) == {"total_rss": 9, "rss": 7}
    # the whole file is still checked: a bad value elsewhere is None only for its key...
    assert parse.parse_flat_keyed("rss x\ncache 5\n", ("cache",)) == {"cache": 5}
    assert parse.parse_flat_keyed("rss x\ncache 5\n", ("rss",)) == {"rss": None}
    # ...a repeated key fails the file, a value past 2^64-1 is None, 20 digits below it not
    with pytest.raises(ValueError):
        parse.parse_flat_keyed("rss 1\ncache 5\nrss 2\n", ("cache",))
    assert parse.parse_flat_keyed("big 18446744073709551616\n", ("big",)) == {"big": None}
    assert parse.parse_flat_keyed("big 18446744073709551615\n") == {"big": 18446744073709551615}
    assert parse.parse_flat_keyed("", ("rss",)) == {}
