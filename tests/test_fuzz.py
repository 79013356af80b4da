"""The parsers that read text kgit did not write (model answers, commit messages)
under hypothesis: they either return a well-formed value or raise their own error
class, and what kgit writes it reads back unchanged.
"""

from __future__ import annotations

import json
import string
import subprocess

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kgit.archive import repo as archive
from kgit.archive import trailers as tr
from kgit.scientist import answers, edits

FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEYS = st.sampled_from(["Kgit-Hypothesis", "Kgit-Status", "Kgit-Device", "Kgit-Time-us", "Kgit-Model", "Kgit-Base"])
TRAILERS = st.lists(st.tuples(KEYS, st.text(max_size=300)), min_size=1, max_size=8)


# -- trailers -------------------------------------------------------------------------
@FAST
@given(st.text(), st.integers(min_value=10, max_value=3000))
def test_one_line_is_one_bounded_line(text, limit):
    line = tr.one_line(text, limit)
    assert len(line) <= limit
    assert len(line.splitlines()) <= 1 and line == line.strip()
    assert not tr._CONTROL.search(line)


@FAST
@given(st.text())
def test_scrub_never_leaves_speedup(text):
    assert "speedup" not in tr.scrub(text)


def _message(trailers, paragraphs, ok):
    return tr.Message("slug: subject", paragraphs, [("Kgit-Experiment", 1), *trailers]).render(ok=ok)


@FAST
@given(TRAILERS, st.lists(st.text(max_size=200), max_size=3), st.booleans())
def test_render_then_parse_round_trips(trailers, paragraphs, ok):
    text = _message(trailers, paragraphs, ok)
    last = text.rstrip("\n").rsplit("\n\n", 1)[-1]
    clean = (lambda v: tr._CONTROL.sub(" ", v)) if ok else tr.scrub
    expected = {}
    for key, value in [("Kgit-Experiment", 1), *trailers]:
        expected.setdefault(key, []).append(tr.one_line(clean(str(value))))
    assert tr.parse(last) == expected
    # The archive reader (the `git log` parser) sees the same values.
    record = "\x1f".join(["a" * 40, "", "t", "n", "e", "0", text])
    (attempt,) = archive.parse_log(record + "\0")
    assert attempt.trailers == expected
    assert "\0" not in text  # git refuses a NUL anywhere in a message
    if not ok:
        assert "speedup" not in text


@settings(max_examples=15, deadline=None)
@given(TRAILERS, st.lists(st.text(max_size=200), max_size=2))
def test_git_reads_the_trailers_kgit_writes(trailers, paragraphs):
    text = _message(trailers, paragraphs, ok=False)
    out = subprocess.run(["git", "interpret-trailers", "--parse"], input=text.encode(), capture_output=True,
                         check=True).stdout.decode()
    expected = [f"{k}: {tr.one_line(tr.scrub(str(v)))}".rstrip() for k, v in [("Kgit-Experiment", 1), *trailers]]
    assert [line.rstrip() for line in out.splitlines()] == expected


@FAST
@given(st.dictionaries(st.sampled_from(["Kgit-Experiment", "Kgit-Attempt", "Kgit-Geomean-us", "Kgit-Speedup",
                                        "Kgit-Time-us", "Kgit-Cost-USD", "Kgit-Status"]),
                       st.text(alphabet=string.printable.strip(), max_size=20), min_size=1))
def test_hand_written_trailers_never_crash_the_reader(values):
    """A person's commit on a kgit/* branch with odd trailer values must not break `kgit log`."""
    values.setdefault("Kgit-Experiment", "1")
    block = "\n".join(f"{k}: {v}" for k, v in values.items())
    record = "\x1f".join(["b" * 40, "", "t", "n", "e", "0", f"subject\n\n{block}\n"])
    for attempt in archive.parse_log(record + "\0"):
        attempt.to_json()
        attempt.measurements()


# -- edit blocks ------------------------------------------------------------------------
SAFE_LINE = st.text(alphabet=string.ascii_letters + string.digits + " _()+-*/,.:#'\"", max_size=40)
LINES = st.lists(SAFE_LINE, min_size=1, max_size=8)


@FAST
@given(st.text())
def test_edit_parser_returns_edits_or_its_own_error(text):
    try:
        found = edits.parse(text)
    except edits.EditError as e:
        assert str(e)
        return
    assert found and all(isinstance(e, edits.Edit) and e.path for e in found)


@FAST
@given(LINES, LINES, LINES, LINES)
def test_search_replace_round_trip(before, search, after, replace):
    original = "\n".join(before + search + after) + "\n"
    needle = "\n".join(search)
    # Overlapping places count too ("0\n0" is in "0\n0\n0" twice): kgit refuses both as ambiguous.
    places = [at for at in range(len(original)) if original.startswith(needle, at)]
    assume(needle.strip() and len(places) == 1)
    # A file with EVOLVE-BLOCK markers limits where edits may go (tested in test_edits.py).
    assume(edits.BLOCK_START not in original and edits.BLOCK_END not in original)
    answer = f"Here is the change.\n\nkernel.py\n{edits.SEARCH}\n{needle}\n{edits.DIVIDER}\n" \
             f"{chr(10).join(replace)}\n{edits.REPLACE}\n"
    parsed = edits.parse(answer)
    assert parsed == [edits.Edit("kernel.py", needle, "\n".join(replace))]
    new = edits.apply({"kernel.py": original}, parsed, ["kernel.py"])
    assert new == {"kernel.py": original.replace(needle, "\n".join(replace), 1)}


@FAST
@given(LINES)
def test_whole_file_round_trip(lines):
    body = "\n".join(lines)
    parsed = edits.parse(f"kernel.py\n```python\n{body}\n```\n")
    assert parsed == [edits.Edit("kernel.py", None, body + "\n")]


@FAST
@given(st.sampled_from(["../reference.py", "/etc/passwd", "problem/reference.py", ".kgit.yaml", "../../x.py",
                        "~/.bashrc", "kernel.py/../../evil.py", "C:\\\\x.py"]), LINES)
def test_edits_never_reach_files_outside_the_editable_set(path, lines):
    answer = f"{path}\n```python\n" + "\n".join(lines) + "\n```\n"
    files = {"kernel.py": "x = 1\n"}
    try:
        new = edits.apply(files, edits.parse(answer), ["kernel.py"])
    except edits.EditError as e:
        assert "not an editable file" in str(e) or "no edits" in str(e)
        return
    assert set(new) == {"kernel.py"}


# -- JSON answers ------------------------------------------------------------------------
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(max_size=30), lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=20)
SMALL_JSON = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12) \
    | st.lists(st.integers() | st.text(max_size=8), max_size=4)


@FAST
@given(st.text())
def test_json_extraction_returns_an_object_or_its_own_error(text):
    try:
        doc = answers.extract_json(text)
    except answers.AnswerError as e:
        assert str(e)
        return
    assert isinstance(doc, dict)


@FAST
@given(st.dictionaries(st.text(max_size=10), JSON, max_size=6), st.text(max_size=100), st.text(max_size=100))
def test_json_round_trip_in_prose(doc, before, after):
    dumped = json.dumps(doc, indent=1)
    assume("```" not in before + dumped + after)
    assert answers.extract_json(f"{before}\n```json\n{dumped}\n```\n{after}") == doc


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["avenues", "plans", "chosen", "base", "reference", "reason"]),
                       SMALL_JSON | st.lists(st.dictionaries(st.sampled_from(
                           ["title", "description", "rubric", "gain_min", "gain_max", "innovation"]), SMALL_JSON),
                                                  max_size=4)),
       st.integers(min_value=1, max_value=5))
def test_answer_validators_raise_only_their_own_error(doc, pick):
    shas = ["0123456789abcdef0123456789abcdef01234567", "fedcba9876543210fedcba9876543210fedcba98"]
    for validate in (lambda: answers.design(doc, pick), lambda: answers.selection(doc, shas)):
        try:
            validate()
        except answers.AnswerError as e:
            assert str(e)
