"""Spark's automatic registration hook for ``format("rivulet")``.

PySpark 4 looks for importable top-level modules named ``pyspark_*`` that export a
``DefaultSource`` subclass of ``DataSource``, and registers each under its ``name()``.
"""

from rivulet.spark import RivuletDataSource as DefaultSource

__all__ = ["DefaultSource"]
