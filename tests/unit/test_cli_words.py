"""What the command line says: bad values blamed on what was given, help that reads whole,
`-h` and `-o` everywhere, one line on stderr for what serve and report did."""

import os
import re
import socket
import subprocess
import sys

import pytest

from tests.helpers.contract import ROOT, run_cgstat

V2 = os.path.join(ROOT, "tests", "fixtures", "v2-systemd", "t1")
COMMANDS = ["stream", "serve", "once", "top", "report", "pid", "procs", "record", "replay", "dump", "events", "story"]


def _help(*args):
    proc = subprocess.run([sys.executable, "-m", "cgstat", *args], capture_output=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode()


# -- modes that make no sense for a file of records ---------------------------------------

@pytest.mark.parametrize("mode,why", [("777", "execute bits"), ("700", "execute bits"), ("640", None),
                                      ("666", "every user write"), ("602", "every user write"), ("600", None)])
def test_output_mode_with_execute_bits_or_world_write_is_refused(tmp_path, mode, why):
    out = tmp_path / "out.jsonl"
    records, err, rc = run_cgstat("once", "--window", "0", "--host-root", V2, "--match", "docker-5113",
                                  "--output", str(out), "--output-mode", mode, check=False)
    if why is None:
        assert rc == 0 and (os.stat(out).st_mode & 0o777) == int(mode, 8), err
    else:
        assert rc == 2 and not out.exists(), err
        assert len(err.splitlines()) == 1 and why in err and f"'{mode}'" in err, err


# -- words ---------------------------------------------------------------------------------

def test_a_bad_interval_is_blamed_on_where_it_came_from():
    _, err, rc = run_cgstat("stream", "--interval", "0.01", check=False)
    assert rc == 2 and "'--interval'" in err and "CGSTAT_INTERVAL" not in err and "env var" not in err, err
    _, err, rc = run_cgstat("stream", check=False, env={"CGSTAT_INTERVAL": "0.01"})
    assert rc == 2 and "CGSTAT_INTERVAL" in err and "0.01 is out of range" in err, err
    # an option given on the command line wins over the environment: not blamed on it
    _, err, rc = run_cgstat("top", "--interval", "0", check=False, env={"CGSTAT_INTERVAL": "5"})
    assert rc == 2 and "CGSTAT_INTERVAL" not in err, err


@pytest.mark.parametrize("args", [["stream", "--count", "1e3"], ["serve", "--count", "x"],
                                  ["report", "r.jsonl", "-o", "r.html", "--points", "1e3"],
                                  ["once", "--max-user-cgroups", "1.5"]])
def test_a_count_that_is_not_a_whole_number_says_so(args):
    _, err, rc = run_cgstat(*args, check=False)
    assert rc == 2 and "is not a whole number" in err and "range" not in err, err


@pytest.mark.parametrize("args,said", [(["stream", "--count", "0"], "0 is out of range: at least 1"),
                                       (["report", "r.jsonl", "-o", "r.html", "--points", "9"],
                                        "9 is out of range: from 50 to 5000")])
def test_a_count_out_of_range_says_its_bounds(args, said):
    _, err, rc = run_cgstat(*args, check=False)
    assert rc == 2 and said in err, err


def test_a_negative_pid_is_a_bad_pid_not_an_unknown_option():
    _, err, rc = run_cgstat("pid", "-5", check=False)
    assert rc == 2 and "-5 is not a process ID" in err and "No such option" not in err, err
    _, err, rc = run_cgstat("pid", "1", "--frob", check=False)
    assert rc == 2 and "No such option: --frob" in err, err
    records, _, _ = run_cgstat("pid", "1", "--host-root", V2)
    assert [r["pid"] for r in records] == [1]


@pytest.mark.parametrize("args,env,said", [
    (["stream", "--listen", "1.2.3"], {}, "'--listen': listen address '1.2.3': expected ADDR:PORT"),
    (["serve", "--listen", "[::1]"], {}, "expected [IPv6]:PORT"),
    (["serve"], {"CGSTAT_LISTEN": "localhost:http"}, "CGSTAT_LISTEN (the environment's '--listen')"),
])
def test_a_bad_listen_address_is_a_usage_error_before_anything_starts(args, env, said):
    _, err, rc = run_cgstat(*args, "--host-root", V2, check=False, env=env)
    assert rc == 2 and len(err.splitlines()) == 1 and said in err, err


def test_a_state_file_that_is_not_ours_is_described_in_words(tmp_path):
    state = tmp_path / "state"
    state.write_bytes(b"12345678")
    _, err, rc = run_cgstat("once", "--host-root", V2, "--state", str(state), check=False)
    assert rc == 1 and "a file of 8 bytes without cgstat's state marker" in err, err
    assert state.read_bytes() == b"12345678"


def test_a_match_that_matches_nothing_says_so_and_what_there_is():
    records, err, rc = run_cgstat("once", "--window", "0", "--host-root", V2, "--match", "zzz")
    assert records == []
    (line,) = [x for x in err.splitlines() if "zzz" in x]
    # the count of the recorded tree's cgroups (--all prints them) and a few of the paths,
    # workloads first (the form of their paths is what a --match needs)
    every, _, _ = run_cgstat("once", "--window", "0", "--host-root", V2, "--all")
    assert f"no cgroup path matches 'zzz'; there are {len(every)}, such as '/init.scope', '/kubepods.slice/" in line
    assert line.endswith("(--all shows every one)") and line.count("', '") == 2, line


# -- help ----------------------------------------------------------------------------------

def test_every_command_summary_is_a_whole_sentence():
    text = _help("--help")
    summaries = dict(re.findall(r"^  (\w+) +(.+)$", text.split("Commands:")[1], re.M))
    assert sorted(summaries) == sorted(COMMANDS)
    for name, summary in summaries.items():
        assert summary.endswith(".") and not summary.endswith("..."), (name, summary)


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_dash_h_is_help_and_placeholders_are_one_style(command):
    text = _help(*([command] if command else []), "-h")
    assert text.startswith("Usage: cgstat") and "-h, --help" in text
    usage = text.splitlines()[0]
    # placeholders are bare capitals (FILE, PID..., N): never <str>, {FILE.jsonl} or {PID}
    assert not re.search(r"[<{][\w.]+[>}]", usage), usage
    options = text.split("Options:")[1]
    assert not re.search(r"<\w+>", options), options
    assert "--help" in _help(*([command] if command else []), "--help")


@pytest.mark.parametrize("command", ["stream", "once", "report"])
def test_dash_o_wherever_there_is_output(command):
    assert re.search(r"^  -o, --output FILE ", _help(command, "-h"), re.M)


def test_stream_and_once_write_to_dash_o(tmp_path):
    for command, extra in (("once", ["--window", "0"]), ("stream", ["--interval", "0.1", "--count", "1"])):
        out = tmp_path / f"{command}.jsonl"
        _, _, rc = run_cgstat(command, *extra, "--host-root", V2, "--match", "docker-5113", "-o", str(out))
        assert rc == 0 and len(out.read_text().splitlines()) == 1


def test_top_ticks_every_second_unless_told(monkeypatch):
    import cgstat.app.top as top_mod
    from cgstat import cli

    seen = []
    monkeypatch.setattr(top_mod, "top", lambda sampler, interval, *a: seen.append(interval) or 0)
    monkeypatch.delenv("CGSTAT_INTERVAL", raising=False)
    for env, args, want in ((None, [], 1.0), ("2.5", [], 2.5), ("2.5", ["--interval", "4"], 4.0)):
        if env:
            monkeypatch.setenv("CGSTAT_INTERVAL", env)
        with pytest.raises(SystemExit) as exit_:
            cli.main(["--host-root", V2, "top", *args])
        assert exit_.value.code == 0 and seen[-1] == want, seen


# -- silence on success, one line for what was done -----------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_says_where_it_listens():
    port = _free_port()
    _, err, rc = run_cgstat("serve", "--host-root", V2, "--listen", f"127.0.0.1:{port}", "--interval", "0.1",
                            "--count", "1")
    assert rc == 0
    assert f"cgstat: serving /metrics and /healthz on http://127.0.0.1:{port}/" in err.splitlines(), err


def test_report_says_what_it_wrote(tmp_path):
    stream = tmp_path / "run.jsonl"
    run_cgstat("once", "--window", "0", "--host-root", V2, "-o", str(stream))
    out = tmp_path / "run.html"
    _, err, rc = run_cgstat("report", str(stream), "-o", str(out))
    assert rc == 0 and out.stat().st_size > 0
    size_kib = out.stat().st_size / 1024
    assert err.splitlines() == [f"cgstat: wrote the report of {stream} to {out} ({size_kib:.1f} KiB)"], err

