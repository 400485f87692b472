"""rivulet.spark_daemon: the installed PySpark's own pyspark.zip goes behind the package on the
path of Spark's Python workers; any other zip, or a path without the package, is left alone."""

from __future__ import annotations

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
