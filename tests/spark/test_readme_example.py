"""The README's Spark section, run as a user runs it: `venv/bin/python job.py`, venv not activated.

The job is the README's ```python blocks of "## Use it from Spark", joined into one script, with
`localhost:9092` replaced by the test broker. It runs as a child process with:

- the venv's python by absolute path; the venv (``--system-site-packages``, for pyspark and
  pyarrow) sees this checkout through a .pth file;
- a PATH without the venv, whose `python3` is a bare venv without pyspark or the connector (what
  Spark starts its Python workers with when PYSPARK_PYTHON is unset);
- no PYTHONPATH, PYSPARK_PYTHON, PYSPARK_DRIVER_PYTHON or VIRTUAL_ENV.

The job must print the README's counts, and confluent-kafka must read what it wrote. The same
job without its `import pybroker_spark` line fails with Spark's DATA_SOURCE_NOT_FOUND: the control
that shows the PATH above is the failing setup.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

from tests.spark.conftest import REPO_ROOT, _require_spark
from tests.spark.helpers import consume_all

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]
BROKER_OVERRIDES = {"num.partitions": "2"}
IMPORT_LINE = re.compile(r"^import pybroker_spark\b.*$", re.M)


def readme_job(bootstrap: str) -> str:
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split("\n## Use it from Spark\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) >= 5, "README: the Spark section's python blocks are missing"
    job = "\n".join(blocks)
    assert "localhost:9092" in job
    return job.replace("localhost:9092", bootstrap)


@pytest.fixture(scope="module")
def venvs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    _require_spark()
    root = tmp_path_factory.mktemp("spark-venvs")
    user = root / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(user)
    purelib = Path(subprocess.check_output(
        [str(user / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        text=True).strip())
    (purelib / "pybroker-checkout.pth").write_text(f"{REPO_ROOT}\n")
    bare = root / "bare"
    venv.EnvBuilder(with_pip=False).create(bare)
    return user, bare


def job_env(bare: Path) -> dict[str, str]:
    # the bare venv's own bin/ (a symlink to its python elsewhere would lose its pyvenv.cfg)
    java = shutil.which("java")
    dirs = [str(bare / "bin")] + ([str(Path(java).parent)] if java else []) + ["/usr/bin", "/bin"]
    drop = {"PYTHONPATH", "PYTHONHOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV",
            "SPARK_HOME", "PYTHONSTARTUP"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = os.pathsep.join(dirs)
    return env


def run_job(python: Path, job: str, workdir: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    workdir.mkdir()
    (workdir / "job.py").write_text(job)
    return subprocess.run([str(python), "job.py"], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=600)


def test_readme_spark_job_runs_with_the_venv_python_unactivated(venvs, broker, tmp_path):
    user, bare = venvs
    env = job_env(bare)
    assert str(user) not in env["PATH"]
    # the PATH's python3 is the failing setup's: it has no connector for Spark to find
    probe = subprocess.run(["python3", "-c", "import pyspark_pybroker"], env=env, capture_output=True)
    assert probe.returncode != 0

    proc = run_job(user / "bin" / "python", readme_job(broker.bootstrap), tmp_path / "job", env)
    assert proc.returncode == 0, f"README job failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    printed = dict(line.split() for line in proc.stdout.splitlines()
                   if re.fullmatch(r"(read|streamed|committed) \d+", line))
    assert printed == {"read": "1000", "streamed": "1000", "committed": "100"}, proc.stdout

    events = consume_all(broker.bootstrap, "events")
    assert sorted(int(m.key()) for m in events) == list(range(1000))
    upper = consume_all(broker.bootstrap, "events-upper")
    assert sorted(m.value().decode() for m in upper) == sorted(f"EVENT-{i}" for i in range(1000))
    orders = consume_all(broker.bootstrap, "orders", isolation="read_committed")
    assert sorted(int(m.key()) for m in orders) == list(range(100))


def test_readme_spark_job_without_the_import_is_the_failure_it_fixes(venvs, broker, tmp_path):
    user, bare = venvs
    job = readme_job(broker.bootstrap)
    assert IMPORT_LINE.search(job), "README: the job's `import pybroker_spark` line is missing"
    job = IMPORT_LINE.sub("", job).replace('"events"', '"events-control"', 1)
    proc = run_job(user / "bin" / "python", job, tmp_path / "job", job_env(bare))
    assert proc.returncode != 0
    assert "DATA_SOURCE_NOT_FOUND" in proc.stderr, proc.stderr[-4000:]
