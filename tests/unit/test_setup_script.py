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
    work, bin_dir, log = tmp_path / "checkout", tmp_path / "bin", tmp_path / "calls.log"
    (work / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "setup.sh", work / "scripts" / "setup.sh")
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
    for tool in ("bash", "sh", "id", "dirname", "basename", "sed", "head", "gcc", "java", "javac", "python3",
                 "openssl", "chromium", "chromedriver"):
        found = shutil.which(tool)
        if found and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    r = subprocess.run(["bash", str(work / "scripts" / "setup.sh"), *([extras] if extras else [])], cwd=work,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    calls = log.read_text().splitlines() if log.exists() else []
    assert any(c.startswith("python -m pip install") for c in calls), calls  # it went on to install Rivulet
    return [c for c in calls if c.startswith("apt-get install")]


def test_default_set_up_installs_kcat_when_missing(tmp_path):
    installs = run_setup(tmp_path, have_kcat=False)
    assert len(installs) == 1 and "kcat" in installs[0].split(), installs


@pytest.mark.parametrize("extras", [None, "test"])
def test_kcat_present_is_not_installed_again(tmp_path, extras):
    installs = run_setup(tmp_path, have_kcat=True, extras=extras)
    assert all("kcat" not in c.split() for c in installs), installs
