"""The answer format for bug tasks (`training.scenarios.edits`): search/replace blocks, whole-function
rewrites and diffs turn into files; anything that does not apply is refused with a reason."""

from __future__ import annotations

import pytest

from training.scenarios.edits import EditError, FunctionSite, apply_answer

SOURCE = '''import math


def clamp(x, low, high):
    """Keep x in [low, high]."""
    if x < low:
        return low
    if x > high:
        return low
    return x


class Box:
    def area(self, w, h):
        return w + h
'''
FILES = {"pkg/geo.py": SOURCE, "tests/test_geo.py": "def test_x():\n    assert True\n"}
SHOWN = {
    "clamp": FunctionSite("pkg/geo.py", "clamp"),
    "Box.area": FunctionSite("pkg/geo.py", "Box.area"),
    "area": FunctionSite("pkg/geo.py", "Box.area"),
}


def test_a_search_replace_block_with_or_without_its_path_edits_the_file() -> None:
    block = "<<<<<<< SEARCH\n    if x > high:\n        return low\n=======\n"
    block += "    if x > high:\n        return high\n>>>>>>> REPLACE\n"
    for answer in (f"pkg/geo.py\n{block}", f"Here is the fix:\n```\n{block}```\n"):
        out = apply_answer(FILES, answer, SHOWN)
        assert "return high" in out["pkg/geo.py"] and out["tests/test_geo.py"] == FILES["tests/test_geo.py"]
        assert out["pkg/geo.py"].count("return low") == 1


def test_a_whole_function_rewrite_replaces_it_in_place_methods_reindented() -> None:
    answer = "```python\ndef area(self, w, h):\n    return w * h\n```"
    out = apply_answer(FILES, answer, SHOWN)["pkg/geo.py"]
    assert "    def area(self, w, h):\n        return w * h\n" in out and "w + h" not in out
    assert out.startswith("import math\n") and "def clamp" in out


def test_a_diff_still_applies() -> None:
    diff = (
        "```diff\n--- a/pkg/geo.py\n+++ b/pkg/geo.py\n@@ -14,2 +14,2 @@\n     def area(self, w, h):\n"
        "-        return w + h\n+        return w * h\n```"
    )
    assert "w * h" in apply_answer(FILES, diff, SHOWN)["pkg/geo.py"]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("I think the bug is in clamp.", "no edit found"),
        ("<<<<<<< SEARCH\n    return nothing\n=======\n    return x\n>>>>>>> REPLACE\n", "SEARCH text is in none"),
        (
            "pkg/geo.py\n<<<<<<< SEARCH\n        return low\n=======\n        return high\n>>>>>>> REPLACE\n",
            "exactly once",
        ),
        ("nope.py\n<<<<<<< SEARCH\n    return x\n=======\n    return 1\n>>>>>>> REPLACE\n", "no file 'nope.py'"),
        ("```python\ndef other():\n    return 1\n```", "not a function shown"),
        ("```python\ndef clamp(x:\n```", "does not parse"),
    ],
)
def test_an_answer_that_does_not_apply_is_refused_with_a_reason(answer: str, reason: str) -> None:
    with pytest.raises(EditError, match=reason):
        apply_answer(FILES, answer, SHOWN)
