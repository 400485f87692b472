"""scripts/setup.sh decides what to install from Debian: the default set-up brings kcat, which
the README's examples use, and asks apt nothing for what is already there. Run for real, with
apt-get (and sudo) replaced by scripts that record what they were asked, and a .venv whose
python records pip's calls, so nothing is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[2]
RECORDER = '#!/bin/sh\necho "$(basename "$0") $*" >> "{log}"\n'


def run_setup(tmp_path: Path, have_kcat: bool, extras: str | None = None) -> list[str]:
    """The set-up's apt-get calls, with only the tools it looks for on PATH (kcat if asked)."""
    calls = set_up(tmp_path, have_kcat, extras)
    assert any(c.startswith("python -m pip install") for c in calls), calls  # it went on to install Rivulet
    return [c for c in calls if c.startswith("apt-get install")]


def set_up(tmp_path: Path, have_kcat: bool = True, extras: str | None = None) -> list[str]:
    """Every call the set-up made to apt-get and the venv's python; the checkout is made on the
    first call and kept for the next."""
    work, bin_dir, log = tmp_path / "checkout", tmp_path / "bin", tmp_path / "calls.log"
    log.unlink(missing_ok=True)
    if work.exists():
        return _run(work, bin_dir, log, extras)
    (work / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "setup.sh", work / "scripts" / "setup.sh")
    shutil.copy2(ROOT / "pyproject.toml", work / "pyproject.toml")
    (work / ".venv" / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    fakes = {"apt-get": RECORDER, "python": RECORDER}
    if have_kcat:
        fakes["kcat"] = RECORDER
    for name, text in fakes.items():
        target = (work / ".venv" / "bin" / name) if name == "python" else bin_dir / name
        target.write_text(text.format(log=log))
        target.chmod(0o755)
    (bin_dir / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    (bin_dir / "sudo").chmod(0o755)
    for tool in ("bash", "sh", "id", "dirname", "basename", "sed", "head", "cat", "ls", "rm", "cksum", "gcc", "java",
                 "javac", "python3", "openssl", "chromium", "chromedriver"):
        found = shutil.which(tool)
        if found and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    return _run(work, bin_dir, log, extras)


def _run(work: Path, bin_dir: Path, log: Path, extras: str | None) -> list[str]:
    env = {"PATH": str(bin_dir), "HOME": str(work.parent)}
    r = subprocess.run(["bash", str(work / "scripts" / "setup.sh"), *([extras] if extras else [])], cwd=work,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return log.read_text().splitlines() if log.exists() else []


def test_default_set_up_installs_kcat_when_missing(tmp_path):
    installs = run_setup(tmp_path, have_kcat=False)
    assert len(installs) == 1 and "kcat" in installs[0].split(), installs


@pytest.mark.parametrize("extras", [None, "test"])
def test_kcat_present_is_not_installed_again(tmp_path, extras):
    installs = run_setup(tmp_path, have_kcat=True, extras=extras)
    assert all("kcat" not in c.split() for c in installs), installs


def test_run_again_installs_rivulet_only_when_what_it_installed_changed(tmp_path):
    def pip_installs() -> list[str]:
        return [c for c in set_up(tmp_path) if c.startswith("python -m pip install")]

    assert any("-e" in c.split() for c in pip_installs())
    assert pip_installs() == []  # nothing changed: pip is not asked again
    pyproject = tmp_path / "checkout" / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n# changed\n")
    assert any("-e" in c.split() for c in pip_installs())
    assert pip_installs() == []
    assert any("-e" in c.split() for c in set_up(tmp_path, extras="test"))  # other extras
