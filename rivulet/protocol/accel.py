"""The optional C accelerator, ``rivulet.protocol._speedups``: built by ``pip install`` when a
C compiler is present, turned off with RIVULET_NO_SPEEDUPS=1. Its users (``records``,
``schema``, ``fetch_answer``) keep a pure-Python path that gives the same results."""

from __future__ import annotations

import os
from types import ModuleType


def speedups() -> ModuleType | None:
    """The extension module, or None when it is not built or turned off."""
    if os.environ.get("RIVULET_NO_SPEEDUPS", "") not in ("", "0"):
        return None
    try:
        from rivulet.protocol import _speedups
    except ImportError:
        return None
    return _speedups
