"""Go clients' own test suites, compiled from their modules on the Go module proxy: the test
binaries of a pinned version built once into ``~/.cache/rivulet/<name>-<version>/`` beside a
writable copy of the module's source, where the binaries run (tests read files of theirs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from benchmarks.reference.kafka import cache_root


def cache_dir(module: str, version: str) -> Path:
    return cache_root() / f"{module.rsplit('/', 1)[-1]}-{version}"


def go(*args: str, cwd: Path, timeout: float) -> str:
    env = dict(os.environ, GOFLAGS="-mod=mod -buildvcs=false")
    r = subprocess.run(["go", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"go {' '.join(args)} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


def _fetch_source(module: str, version: str, cache: Path) -> None:
    """The module's source copied into ``cache/src``, writable: the module cache is read-only,
    and the build wants a module it may write go.sum into."""
    if shutil.which("go") is None:
        pytest.skip(f"Go is not installed, so {module}'s suite cannot be built")
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        go("mod", "init", "rivulet.test/gosuite", cwd=work, timeout=60)
        try:
            go("get", f"{module}@{version}", cwd=work, timeout=600)
        except (RuntimeError, subprocess.TimeoutExpired) as e:  # like the Java tests without Maven Central
            pytest.skip(f"cannot fetch {module}@{version} from the Go module proxy: {str(e)[-500:]}")
        modcache = go("env", "GOMODCACHE", cwd=work, timeout=60).strip()
    shutil.copytree(Path(modcache) / f"{module}@{version}", cache / "src")
    for d, _dirs, files in os.walk(cache / "src"):
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(os.path.join(d, f), 0o644)


def go_test_binary(module: str, version: str, package: str, name: str) -> tuple[Path, Path]:
    """The tests of ``package`` (a directory of the module, "." for its root) compiled into the
    binary ``<name>.test``, built once per version, and the package's source directory."""
    cache = cache_dir(module, version)
    binary, pkg = cache / f"{name}.test", cache / "src" / package
    if binary.exists() and pkg.is_dir():
        return binary, pkg
    if not pkg.is_dir():
        _fetch_source(module, version, cache)
    partial = binary.with_suffix(".partial")
    go("test", "-c", "-o", str(partial), ".", cwd=pkg, timeout=900)
    partial.rename(binary)
    return binary, pkg
