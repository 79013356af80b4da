"""The writer's edit format: parsing, whitespace-tolerant application, refusals, messages."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgit.scientist import answers, edits

KERNEL = """import triton

BLOCK = 1024  # kgit: tune 512 1024


def custom_kernel(data):
    a, b, out = data
    if a.numel() == 0:
        return out
    launch(a, b, out)
    return out
"""


def block(path, search, replace, before="Some prose first.\n\n"):
    return f"{before}{path}\n```python\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```\n"


def test_search_replace_inside_a_fence_and_bare():
    fenced = block("kernel.py", "BLOCK = 1024  # kgit: tune 512 1024", "BLOCK = 512  # kgit: tune 512 1024")
    bare = "**kernel.py**\n<<<<<<< SEARCH\n    launch(a, b, out)\n=======\n    launch2(a, b, out)\n>>>>>>> REPLACE\n"
    parsed = edits.parse(fenced + "\nand\n\n" + bare)
    assert [(e.path, e.search is not None) for e in parsed] == [("kernel.py", True), ("kernel.py", True)]
    out = edits.apply({"kernel.py": KERNEL}, parsed, ["kernel.py"])["kernel.py"]
    assert "BLOCK = 512" in out and "launch2(a, b, out)" in out and "launch(a" not in out


def test_whole_file_answer():
    text = "Rewritten.\n\nkernel.py\n```python\nprint('new')\n```\nDone."
    out = edits.apply({"kernel.py": KERNEL}, edits.parse(text), ["kernel.py"])
    assert out == {"kernel.py": "print('new')\n"}


def test_whitespace_drift_is_tolerated_and_indentation_follows_the_file():
    # The model dropped the 4-space indentation and added trailing spaces.
    search = "if a.numel() == 0:   \n    return out"
    replace = "if a.numel() == 0:\n    return out.zero_()"
    out = edits.replace_once(KERNEL, search, replace)
    assert "    if a.numel() == 0:\n        return out.zero_()\n" in out


def test_a_different_token_is_not_fuzzy_matched_and_the_error_helps():
    with pytest.raises(edits.EditError) as e:
        edits.replace_once(KERNEL, "if a.numel() == 1:\n    return out", "x")
    message = str(e.value)
    assert "matched nothing" in message and "if a.numel() == 0:" in message and "Copy the SEARCH lines" in message


def test_ambiguous_search_asks_for_more_context():
    # Ignoring indentation, "return out" is two lines of KERNEL.
    with pytest.raises(edits.EditError, match="matches 2 places"):
        edits.replace_once(KERNEL, "return out", "return None")


def test_overlapping_places_are_ambiguous_too():
    # "x\nx" is in "x\nx\nx" at two places that share a line: no single edit is meant.
    with pytest.raises(edits.EditError, match="matches 2 places"):
        edits.replace_once("x\nx\nx\n", "x\nx", "y")


def test_exact_matches_cover_whole_lines_only():
    # The exact text is also inside the 8-space line; only the 4-space line is a whole-line match.
    new = edits.replace_once(KERNEL, "    return out", "    return None")
    assert "        return out" in new and "\n    return None" in new
    # Part of a line is never edited in place: `BLOCK = 1` must not turn 128 into 228.
    with pytest.raises(edits.EditError, match="matched nothing"):
        edits.replace_once("BLOCK = 128\n", "BLOCK = 1", "BLOCK = 2")


def test_edits_outside_the_editable_files_are_refused():
    text = block("problem/reference.py", "x", "y") + block("kernel.py", "BLOCK = 1024", "BLOCK = 2048", "")
    with pytest.raises(edits.EditError) as e:
        edits.apply({"kernel.py": KERNEL}, edits.parse(text), ["kernel.py"])
    assert "problem/reference.py, which is not an editable file" in str(e.value)


def test_evolve_block_regions_limit_what_may_change():
    marked = "HEADER = 1\n# EVOLVE-BLOCK-START\nx = 1\n# EVOLVE-BLOCK-END\nFOOTER = 2\n"
    inside = edits.parse(block("kernel.py", "x = 1", "x = 2\ny = 3"))
    assert "y = 3" in edits.apply({"kernel.py": marked}, inside, ["kernel.py"])["kernel.py"]
    outside = edits.parse(block("kernel.py", "FOOTER = 2", "FOOTER = 3"))
    with pytest.raises(edits.EditError, match="outside them"):
        edits.apply({"kernel.py": marked}, outside, ["kernel.py"])
    whole = edits.parse("kernel.py\n```python\nx = 5\n```\n")
    with pytest.raises(edits.EditError, match="EVOLVE-BLOCK-START"):
        edits.apply({"kernel.py": marked}, whole, ["kernel.py"])


def test_answers_without_edits_or_with_a_cut_block_say_what_to_send():
    with pytest.raises(edits.EditError, match="holds no edits"):
        edits.parse("I think the kernel is fine as it is.")
    with pytest.raises(edits.EditError, match="cut off"):
        edits.parse("kernel.py\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n")
    with pytest.raises(edits.EditError, match="no file name"):
        edits.parse("<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n")


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(st.text("abcxyz_=+ ", min_size=1, max_size=12), min_size=3, max_size=12, unique=True),
       data=st.data())
def test_replacing_any_unique_run_of_lines_equals_splicing_it(lines, data):
    text = "\n".join(lines) + "\n"
    start = data.draw(st.integers(0, len(lines) - 1))
    end = data.draw(st.integers(start + 1, len(lines)))
    search = "\n".join(lines[start:end])
    if text.count(search) != 1 or not search.strip():
        return
    new = "\n".join(lines[:start] + ["REPLACED"] + lines[end:]) + "\n"
    assert edits.replace_once(text, search, "REPLACED") == new


def test_json_answers_are_extracted_and_validated():
    doc = answers.extract_json('Reasoning...\n```json\n{"base": "abc1234", "reason": "fastest"}\n```')
    assert doc["base"] == "abc1234"
    with pytest.raises(answers.AnswerError, match="no ```json block"):
        answers.extract_json("no json here")
    with pytest.raises(answers.AnswerError, match="not a valid JSON object"):
        answers.extract_json('```json\n{"base": "x",}\n```')
    shas = ["abc1234" + "0" * 33, "abd9999" + "0" * 33]
    assert answers.selection(doc, shas).base == shas[0]
    with pytest.raises(answers.AnswerError, match="not in the archive"):
        answers.selection({"base": "ffff123", "reason": "r"}, shas)
    with pytest.raises(answers.AnswerError, match="several commits"):
        answers.selection({"base": "abc1", "reason": "r"}, shas + ["abc1999" + "0" * 33])


def test_design_pick_follows_the_paper_rule_when_the_answer_gives_none():
    plans = [{"title": f"p{i}", "description": "d", "gain_min": gmin, "gain_max": gmax, "innovation": inn}
             for i, (gmin, gmax, inn) in enumerate([(0.0, 0.1, 9), (0.05, 0.9, 2), (0.3, 0.4, 1), (0.1, 0.2, 3)])]
    picked = answers.design({"avenues": [], "plans": plans}, pick=3)
    assert picked.chosen == [0, 1, 2]  # most innovative, highest max gain, highest min gain
    assert answers.design({"plans": plans, "chosen": [3, 3, 1]}, pick=3).chosen == [3, 1]
    with pytest.raises(answers.AnswerError, match="0-based"):
        answers.design({"plans": plans, "chosen": [4]}, pick=3)
    assert answers.Plan("t", "d", gain_min=0.1, gain_max=0.4).expected_gain == "10%..40%"
