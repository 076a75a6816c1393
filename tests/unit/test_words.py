"""Words in the code and the docs: none cites one of this project's own issue numbers. The
repository has no tracker, so "issue 23" tells a reader nothing; the reason itself does (a
public upstream issue is cited by its project, as `gpustat #161` or a URL)."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# "issue 13", "Issue 23's", "issues 19-23", "issue #7", and names like _issue23_samples;
# not ".../issues/123" (an upstream URL)
CITATION = re.compile(r"(?<![/\w])issues?[ \t]*#?[0-9]+|issue[0-9]+", re.IGNORECASE)
PLACES = ("cgstat", "docs", "bench", "tests", "systemd", "deploy", "bin", ".ci", "README.md", "pyproject.toml")
SKIP_DIRS = {"fixtures", "corpus", "__pycache__", ".venv", ".pytest_cache", ".hypothesis", "build"}


def citations(text):
    return [m.group(0) for m in CITATION.finditer(text)]


def _files():
    for place in PLACES:
        top = os.path.join(ROOT, place)
        if os.path.isfile(top):
            yield top
        for folder, dirs, names in os.walk(top):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
            for name in names:
                if not name.endswith((".pyc", ".so", ".png", ".gz")):
                    yield os.path.join(folder, name)


def test_the_checker_finds_citations_and_leaves_upstream_ones():
    assert citations("(issue 13's shape)") == ["issue 13"]
    assert citations("Issue 23's fields; the cost of issues 19-23; see issue #7") == \
        ["Issue 23", "issues 19", "issue #7"]
    assert citations("def _issue23_samples(record):") == ["issue23"]
    assert citations("shuffled PIDs (gpustat #161); https://github.com/moby/moby/issues/42 ; "
                     "an issue that 2 users saw; tissue 3") == []


def test_no_file_cites_an_issue_number():
    found = []
    for path in _files():
        if os.path.samefile(path, __file__):
            continue  # its examples above
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                for c in citations(line):
                    found.append("%s:%d: %s" % (os.path.relpath(path, ROOT), n, c))
    assert found == [], "say the reason instead:\n" + "\n".join(found)
