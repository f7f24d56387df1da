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


TWO_NODES = {"STATE": "/tmp/scaleprobe-slurm-tests2", "NODES": "2", "NS": "spslurmt",
             "NET": "10.215.7", "SLURMCTLD_PORT": "6917", "SLURMD_PORT": "6918"}


@pytest.fixture(scope="session")
def slurm_two_nodes():
    """Two Slurm nodes, each in a network namespace of its own joined by a bridge (NODES=2 of
    scripts/slurm-local.sh): a job over both really crosses a network. Yields ``on_head(argv,
    timeout)``, which runs a command on the head node, where the cluster's commands reach
    slurmctld; every daemon and namespace is removed afterwards, also on failure."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the Slurm tests start daemons in network namespaces")
    from scaleprobe.netlab import netns

    ok, why = netns.available()
    if not ok:
        pytest.skip(f"no network namespaces here: {why}")
    try:
        import submitit  # noqa: F401
    except ImportError:
        pytest.skip("needs submitit: pip install 'scaleprobe[cluster]'")
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        pytest.skip("no Slurm and no apt-get to install it")
    env = {**os.environ, **TWO_NODES}
    subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
    up = subprocess.run(["bash", str(SCRIPT), "start"], env=env, capture_output=True,
                        text=True, timeout=900)

    def on_head(argv, timeout):
        return subprocess.run(["bash", str(SCRIPT), "exec", *map(str, argv)], env=env,
                              capture_output=True, text=True, timeout=timeout)

    try:
        if up.returncode != 0:
            if shutil.which("slurmctld") is None:
                pytest.skip(f"could not install Slurm here: {up.stderr.strip()[-300:]}")
            pytest.fail(f"the two-node Slurm cluster did not start: {up.stdout}{up.stderr}")
        yield on_head
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
