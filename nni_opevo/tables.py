"""The classArgs tables of a Markdown page (docs/tuners.md), regenerated from the tuners'
declarations: a block ``<!-- classArgs of <TunerClass> -->`` ... ``<!-- end of classArgs -->`` is
rewritten with ``class_args.markdown`` of that tuner (``nni-opevo docs``; a test keeps the
shipped page current)."""
from __future__ import annotations

import re

from . import registry
from .class_args import markdown

TABLE = re.compile(r"(<!-- classArgs of (\w+) -->\n)(.*?)(<!-- end of classArgs -->)", re.S)


def rewrite_tables(doc: str) -> str:
    """``doc`` with every classArgs block regenerated from its tuner's declaration."""
    return TABLE.sub(lambda m: m.group(1) + markdown(registry.export(m.group(2)).Args) + m.group(4), doc)


def rewrite_file(path: str) -> bool:
    """Regenerate the classArgs tables of a Markdown file in place; whether it changed."""
    with open(path, encoding="utf-8") as handle:
        old = handle.read()
    new = rewrite_tables(old)
    if new != old:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(new)
    return new != old
