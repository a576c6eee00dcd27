"""Files written where a planted link may wait: under a temporary name, then renamed into place."""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any


def replace_file(path: str, write: Callable[[str], Any]) -> None:
    """``write(temporary)`` then rename it onto ``path``: a link planted at ``path`` is replaced,
    never followed, and a reader never sees half a file."""
    folder, name = os.path.split(os.path.abspath(path))
    temporary = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)


def copy_file(source: str, destination: str) -> None:
    """``source`` copied onto ``destination`` through ``replace_file``."""
    replace_file(destination, lambda temporary: shutil.copyfile(source, temporary))
