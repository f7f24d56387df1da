"""A one-node Slurm cluster for these tests: scripts/slurm-local.sh starts munged, slurmctld
and slurmd (installing Debian's slurm-wlm and munge when missing) and stops every daemon
afterwards, also when a test fails. Root only; skipped with the reason elsewhere."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm-local.sh"
STATE = "/tmp/scaleprobe-slurm-tests"


@pytest.fixture(scope="session")
def slurm_cluster():
    if os.geteuid() != 0:
        pytest.skip("needs root: the Slurm tests start munged, slurmctld and slurmd")
    try:
        import submitit  # noqa: F401
    except ImportError:
        pytest.skip("needs submitit: pip install 'scaleprobe[cluster]'")
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        pytest.skip("no Slurm and no apt-get to install it")
    env = {**os.environ, "STATE": STATE, "SLURMCTLD_PORT": "6917", "SLURMD_PORT": "6918"}
    up = subprocess.run(["bash", str(SCRIPT), "start"], env=env, capture_output=True,
                        text=True, timeout=900)
    if up.returncode != 0:
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
        if shutil.which("slurmctld") is None:
            pytest.skip(f"could not install Slurm here: {up.stderr.strip()[-300:]}")
        pytest.fail(f"the local Slurm cluster did not start: {up.stdout}{up.stderr}")
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = f"{STATE}/slurm.conf"
    try:
        yield f"{STATE}/slurm.conf"
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
