"""The broker process's cyclic-collector thresholds."""

from __future__ import annotations

import gc

import pytest

from rivulet.cli.main import GC_THRESHOLDS, tune_gc

pytestmark = pytest.mark.fast


def test_tune_gc_sets_larger_thresholds_than_cpythons():
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        tune_gc()
        young, middle, oldest = gc.get_threshold()
        assert (young, middle, oldest) == GC_THRESHOLDS
        assert young > 700 and middle >= 10 and oldest > 10
    finally:
        gc.set_threshold(*before)
