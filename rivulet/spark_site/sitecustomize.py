"""Run at the start of every Python process Spark starts from a Rivulet session
(``rivulet.spark.session.worker_pythonpath`` puts this directory on their ``PYTHONPATH``).

Spark puts ``pyspark.zip`` first on its Python processes' path, and Python keeps no bytecode
for a zip's modules. ``rivulet.spark_daemon`` fixes that for the workers the daemon forks, but
Spark starts some processes itself with the module named, which no daemon setting reaches: the
driver-side planner of a streaming Python source (one per query, on the path of every
micro-batch's planning) compiled PySpark from the zip, about 0.9 CPU s, against 0.3 s from
the installed package's bytecode. Python imports ``sitecustomize`` from the path before it runs
the named module, so the same path change is made here. Any other ``sitecustomize`` on the
path, which this one hides, runs after it.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import PathFinder
from importlib.util import module_from_spec


def _run() -> None:
    try:
        from rivulet.spark_daemon import prefer_installed_pyspark
    except ImportError:  # an interpreter without Rivulet: nothing to change
        pass
    else:
        prefer_installed_pyspark(sys.path)
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        hidden = module_from_spec(spec)
        sys.modules["sitecustomize"] = hidden
        spec.loader.exec_module(hidden)


_run()
