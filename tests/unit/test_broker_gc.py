"""The broker process's cyclic-collector thresholds."""

from __future__ import annotations

import gc

import pytest

from rivulet.cli.main import GC_YOUNG_THRESHOLD, tune_gc

pytestmark = pytest.mark.fast


def test_tune_gc_raises_only_the_young_threshold():
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        tune_gc()
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, 10, 10)
        assert GC_YOUNG_THRESHOLD > 700
    finally:
        gc.set_threshold(*before)
