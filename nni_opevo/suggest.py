"""One-line messages for a name that is not among the known ones, with the closest matches."""
from __future__ import annotations

import difflib
from collections.abc import Iterable


def unknown(what: str, name: object, known: Iterable[str]) -> str:
    """``unknown workload 'MM4' (did you mean MM1, MM2?); known: MM1, MM2, ...``"""
    known = list(known)
    close = difflib.get_close_matches(str(name), known, n=3, cutoff=0.6)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return f"unknown {what} {name!r}{hint}; known: {', '.join(known)}"
