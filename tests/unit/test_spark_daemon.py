"""rivulet.spark_daemon: the installed PySpark's own pyspark.zip goes behind the package on the
path of Spark's Python workers; any other zip, or a path without the package, is left alone.
rivulet/spark_site's sitecustomize does the same in the processes Spark starts without the daemon."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rivulet.spark_daemon import prefer_installed_pyspark

pytestmark = pytest.mark.fast


def _pyspark(root: Path) -> tuple[str, str, str]:
    (root / "pyspark" / "python" / "lib").mkdir(parents=True)
    (root / "pyspark" / "__init__.py").write_text("")
    own = root / "pyspark" / "python" / "lib"
    for name in ("pyspark.zip", "py4j-src.zip"):
        (own / name).write_bytes(b"")
    return str(root), str(own / "pyspark.zip"), str(own / "py4j-src.zip")


def test_the_installed_packages_own_zip_goes_behind_the_package(tmp_path):
    site, zip_, py4j = _pyspark(tmp_path / "site")
    path = ["", zip_, py4j, "/repo", site]
    assert prefer_installed_pyspark(path)
    assert path == ["", py4j, "/repo", site, zip_]  # py4j's zip stays: another package's code


def test_another_spark_homes_zip_is_left_alone(tmp_path):
    site, _, _ = _pyspark(tmp_path / "site")
    _, other_zip, _ = _pyspark(tmp_path / "spark-home" / "python")
    path = [other_zip, site]
    assert not prefer_installed_pyspark(path)
    assert path == [other_zip, site]
    assert not prefer_installed_pyspark(other := [other_zip])
    assert other == [other_zip]


# ---------------------------------------------------------------- rivulet/spark_site/sitecustomize.py

_SITE_DIR = Path(__file__).resolve().parents[2] / "rivulet" / "spark_site"
_REPO = Path(__file__).resolve().parents[2]


def _python(pythonpath: list[str], code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_a_process_started_with_the_zip_first_imports_the_installed_pyspark():
    pyspark = pytest.importorskip("pyspark")
    zip_ = Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip"
    if not zip_.is_file():
        pytest.skip("this PySpark has no pyspark.zip of its own")
    # As Spark starts the streaming source's planner: its zip first, the module named.
    found = _python([str(zip_), str(_REPO), str(_SITE_DIR)], "import pyspark; print(pyspark.__file__)")
    assert found == pyspark.__file__
    assert _python([str(zip_), str(_REPO)], "import pyspark; print(pyspark.__file__)").startswith(str(zip_))


def test_a_sitecustomize_it_hides_still_runs(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.HIDDEN_SITE_RAN = True\n")
    out = _python([str(_REPO), str(_SITE_DIR), str(tmp_path)],
                  "import builtins, sys; print(getattr(builtins, 'HIDDEN_SITE_RAN', False), "
                  "sys.modules['sitecustomize'].__file__)")
    assert out == f"True {tmp_path / 'sitecustomize.py'}"


def test_the_planner_imports_neither_the_sink_nor_the_decoder():
    # What the streaming source's planner process imports when it unpickles the data source:
    # the sink, the record decoder and TLS's cryptography are for the executors and SSL only.
    pytest.importorskip("pyspark")
    code = ("import sys, rivulet.spark; print(' '.join(m for m in ('rivulet.spark.sink', 'rivulet.arrow.records', "
            "'pyarrow.compute', 'cryptography', 'rivulet.security.tls') if m in sys.modules))")
    assert _python([str(_REPO)], code) == ""
