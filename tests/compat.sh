#!/usr/bin/env bash
# The other Pythons this machine has (pyenv's, /usr/bin's), each in a fresh venv where pip
# picks the newest typer/orjson that version supports:
# - the oldest (the old typer with click, the oldest orjson), with the test extra:
#   tests/unit (no root, no cgroups of their own: the parsers, recorded trees, identity,
#   faults, the CLI and its safety checks, sd_notify, the event rules, tables/CSV, network
#   parsing, Prometheus rendering, the field table, the NVML double); that is the code whose
#   behaviour can differ between Pythons and typer/click versions (tests/live runs the same
#   code on the suite's interpreter);
# - every other one, with cgstat alone (no test extra): a smoke run (the CLI on a recorded
#   tree, every --help, the Python API), which is where a syntax or dependency problem shows.
# Skips quietly when there are none. Usage: bash tests/compat.sh
set -euo pipefail
cd "$(dirname "$0")/.."
current=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
declare -A pys=()
for py in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.*/bin/python /usr/bin/python3.*; do
    [ -x "$py" ] || continue
    v=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || continue
    case "$v" in 3.[0-6]) continue ;; esac
    [ "$v" = "$current" ] && continue
    [ -n "${pys[$v]:-}" ] && continue
    pys[$v]=$py
done
if [ ${#pys[@]} -eq 0 ]; then
    echo "compat: no other Python 3.7+ found, skipped"
    exit 0
fi
versions=$(printf '%s\n' "${!pys[@]}" | sort -t. -k1,1n -k2,2n)
oldest=$(echo "$versions" | head -n 1)
V2=tests/fixtures/v2-systemd/t1
smoke() { # version python -> "compat: ..." lines; exit status 1 on failure
    local v=$1 py=$2 venv log c want
    venv=$(mktemp -d /tmp/cgstat-compat-XXXXXX)
    log="$venv/run.log"
    # ensurepip of Pythons 3.7-3.9 runs pip from its wheel, whose certifi extracts
    # cacert.pem to a temporary file it never removes: kept inside the venv's folder
    mkdir "$venv/tmp"
    if ! TMPDIR="$venv/tmp" "$py" -m venv "$venv" >/dev/null 2>&1; then
        echo "compat: python $v has no venv, skipped"; rm -rf "$venv"; return 0
    fi
    if [ "$v" = "$oldest" ]; then want="$wheel[test]"; else want=$wheel; fi
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$want" 2>&1 | grep -v WARNING || true
    echo "compat: python $v ($("$venv/bin/python" -c 'import typer, orjson; print("typer", typer.__version__, "orjson", orjson.__version__)'))"
    if [ "$v" = "$oldest" ]; then
        if "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/unit >"$log" 2>&1; then
            tail -n 1 "$log"
        else
            cat "$log"; echo "compat: python $v FAILED"; rm -rf "$venv"; return 1
        fi
    else
        c="$venv/bin/cgstat"
        if { for cmd in "" stream once serve top pid report; do "$c" $cmd --help >/dev/null && "$c" $cmd -h >/dev/null || exit 1; done
             "$c" --host-root "$V2" once --window 0 --all | "$venv/bin/python" -c 'import sys, json; n = sum(1 for l in sys.stdin if json.loads(l)["type"] == "cgroup"); assert n == 34, n'
             "$c" once --window 0 --format csv --host-root "$V2" >/dev/null
             "$venv/bin/python" -c "import cgstat; s = cgstat.Sampler(host_root='$V2', match='docker-5113'); assert s.tick()[0]['container']['name'] == 'tf-training'"
           } >"$log" 2>&1; then
            echo "smoke passed"
        else
            cat "$log"; echo "compat: python $v FAILED"; rm -rf "$venv"; return 1
        fi
    fi
    rm -rf "$venv"
}

# One wheel for every venv (parallel `pip install .` would build in the same build/ folder),
# built from a copy of what it is made of (pyproject.toml: the readme, the cgstat package
# and its data): tests/run starts this script while its own `pip install -e .` writes the
# checkout's build metadata.
wheel_dir=$(mktemp -d /tmp/cgstat-compat-wheel-XXXXXX)
trap 'rm -rf "$wheel_dir"' EXIT
mkdir "$wheel_dir/src"
cp -R pyproject.toml README.md cgstat "$wheel_dir/src/"
python3 -m pip wheel -q --no-deps --disable-pip-version-check -w "$wheel_dir" "$wheel_dir/src" 2>&1 | grep -v WARNING || true
wheel=$(ls "$wheel_dir"/cgstat-*.whl)

# The oldest runs the full set in the foreground; the smoke runs (mostly pip installing)
# run beside it, each printing its own lines when it is done.
status=0
outs=()
for v in $versions; do
    [ "$v" = "$oldest" ] && continue
    out=$(mktemp /tmp/cgstat-compat-out-XXXXXX)
    outs+=("$out")
    (smoke "$v" "${pys[$v]}" >"$out" 2>&1; echo "rc=$?" >>"$out") &
done
smoke "$oldest" "${pys[$oldest]}" || status=1
wait
for out in "${outs[@]}"; do
    grep -v '^rc=' "$out"
    grep -q '^rc=0$' "$out" || status=1
    rm -f "$out"
done
exit $status
