#!/usr/bin/env bash
# Run the tests that make no cgroups of their own (parsers, recorded trees, identity,
# faults, model, corpus, CLI) on every other Python 3.7+ interpreter this machine has
# (pyenv's, /usr/bin's), each in a fresh venv where pip picks the newest typer/orjson
# that version supports. Skips quietly when there are none. Usage: bash tests/compat.sh
set -euo pipefail
cd "$(dirname "$0")/.."
current=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
found=()
for py in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.*/bin/python /usr/bin/python3.*; do
    [ -x "$py" ] || continue
    v=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || continue
    case "$v" in 3.[0-6]) continue ;; esac
    [ "$v" = "$current" ] && continue
    case " ${found[*]:-} " in *" $v "*) continue ;; esac
    found+=("$v")
    venv=$(mktemp -d /tmp/cgstat-compat-XXXXXX)
    trap 'rm -rf "$venv"' EXIT
    "$py" -m venv "$venv" >/dev/null 2>&1 || { echo "compat: python $v has no venv, skipped"; continue; }
    "$venv/bin/python" -m pip install -q --disable-pip-version-check '.[test]' 2>&1 | grep -v WARNING || true
    echo "compat: python $v ($("$venv/bin/python" -c 'import typer, orjson; print("typer", typer.__version__, "orjson", orjson.__version__)'))"
    log="$venv/pytest.log"
    if (cd tests && "$venv/bin/python" -m pytest -q -p no:cacheprovider test_parse.py test_recorded_trees.py \
        test_identity.py test_faults.py test_faults_more.py test_model.py test_corpus.py test_cli.py \
        test_cli_safety.py test_sdnotify.py) >"$log" 2>&1; then
        tail -n 1 "$log"
    else
        cat "$log"
        echo "compat: python $v FAILED"
        exit 1
    fi
    rm -rf "$venv"
    trap - EXIT
done
[ ${#found[@]} -gt 0 ] || echo "compat: no other Python 3.7+ found, skipped"
