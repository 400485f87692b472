"""Spark's Python daemon for Rivulet's sessions (``spark.python.daemon.module``): PySpark's own,
with PySpark imported from its installed package instead of from ``pyspark.zip``.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on its Python workers' path. Python
keeps no bytecode for modules imported from a zip, so every worker process compiled each
PySpark module it imported: about 0.9 CPU seconds for what a data-source worker imports,
against 0.3 from the installed package's cached bytecode. When that zip is the installed
package's own copy (a pip-installed PySpark, whose directory is SPARK_HOME), both hold the same
code, and the zip is moved behind the package on ``sys.path``; any other layout is left alone.
The daemon forks its workers, so they inherit the path.

It lives outside ``rivulet.spark``: importing that package imports PySpark, which would come
from the zip before the path could change.
"""

from __future__ import annotations

import os
import runpy
import sys


def prefer_installed_pyspark(path: list[str]) -> bool:
    """Move the installed PySpark's own ``pyspark.zip`` behind the directories on ``path``
    (in place); whether it did."""
    own = {os.path.realpath(os.path.join(entry, "pyspark", "python", "lib", "pyspark.zip"))
           for entry in path if entry and not entry.endswith(".zip")
           and os.path.isfile(os.path.join(entry, "pyspark", "__init__.py"))}
    zips = [entry for entry in path if entry.endswith("pyspark.zip") and os.path.realpath(entry) in own]
    for entry in zips:
        path.remove(entry)
        path.append(entry)
    return bool(zips)


if __name__ == "__main__":
    prefer_installed_pyspark(sys.path)
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)
