"""The release artifacts, installed as a user installs them, run a produce and a consume.

- The manylinux wheel (tools/build_wheels.sh: `python -m build` + `auditwheel repair --strip`)
  goes into a fresh venv with its dependencies from the configured index; the venv's `pybroker`
  runs on the compiled modules, and confluent-kafka produces to it and consumes back.
- The sdist installed where no C compiler works (CC, LDSHARED=/bin/false) installs with one
  warning line, and the installed package runs on the pure-Python twins (one warning line when
  pybroker._native is imported): the same produce and consume.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.wheels.conftest import Dist, clean_env, pip_install

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheels")]

N = 500


def produce_and_consume(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4",
                         "enable.idempotence": True})
    for i in range(N):
        producer.produce(topic, key=str(i).encode(), value=f"value-{i}".encode())
    assert producer.flush(30) == 0, "records left undelivered"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-g",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: dict[int, str] = {}
    try:
        for _ in range(600):
            if len(got) == N:
                break
            for msg in consumer.consume(N, 0.5):
                assert msg.error() is None, msg.error()
                got[int(msg.key())] = msg.value().decode()
    finally:
        consumer.close()
    assert got == {i: f"value-{i}" for i in range(N)}


def venv_python(venv: Path, code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=venv, env=env or clean_env(),
                          capture_output=True, text=True, timeout=120)


def test_wheel_is_manylinux_stripped_and_per_version(dist: Dist) -> None:
    # the oldest policy the symbols allow (GLIBC_2.14 -> manylinux_2_17), this CPython's own ABI
    cp = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert re.fullmatch(rf"pybroker-[\d.]+-{cp}-{cp}-manylinux2014_x86_64\.manylinux_2_17_x86_64\.whl",
                        dist.wheel.name), dist.wheel.name
    elftools = pytest.importorskip("elftools.elf.elffile", reason="pyelftools comes with auditwheel")
    with zipfile.ZipFile(dist.wheel) as whl:
        names = whl.namelist()
        modules = [n for n in names if n.startswith("pybroker/_native/_") and n.endswith(".so")]
        assert len(modules) == 7, modules
        for name in modules:
            with whl.open(name) as raw:
                elf = elftools.ELFFile(io.BytesIO(raw.read()))
                sections = {s.name for s in elf.iter_sections()}
                assert not {".debug_info", ".symtab"} & sections, f"{name} is not stripped"
        # both top-level packages and Spark's auto-registration module; no build leftovers
        assert {"pybroker/__init__.py", "pybroker_spark/__init__.py", "pyspark_pybroker.py"} <= set(names)
        assert not [n for n in names if n.endswith((".pyx", ".c", ".pyc"))]


def test_wheel_in_fresh_venv_serves_confluent_kafka(dist: Dist, fresh_venv: Path, tmp_path: Path,
                                                    run_installed_broker) -> None:
    pip_install(fresh_venv, str(dist.wheel))
    probe = venv_python(fresh_venv, "import pybroker, pybroker._native as n; "
                                    "print(n.HAVE_EXTENSIONS, pybroker.__file__)")
    assert probe.returncode == 0, probe.stderr
    have, location = probe.stdout.split()
    assert have == "True" and location.startswith(str(fresh_venv)), probe.stdout
    assert "RuntimeWarning" not in probe.stderr, probe.stderr
    workdir = tmp_path / "run"
    workdir.mkdir()
    broker = run_installed_broker(fresh_venv, workdir)
    produce_and_consume(broker.bootstrap, "wheel-installed")
    assert "pure-Python twins" not in broker.log()
    assert broker.close() == 0, broker.log()[-3000:]


def test_sdist_without_a_compiler_installs_the_pure_twins(dist: Dist, fresh_venv: Path, tmp_path: Path,
                                                          run_installed_broker) -> None:
    no_cc = clean_env(CC="/bin/false", CXX="/bin/false", LDSHARED="/bin/false")
    # -v: pip shows the build's output; --no-cache-dir: build here, never reuse a built wheel
    proc = pip_install(fresh_venv, "-v", "--no-cache-dir", str(dist.sdist), env=no_cc)
    output = proc.stdout + proc.stderr
    warned = [line for line in output.splitlines() if "pybroker: C extensions not built" in line]
    assert len(warned) == 1, output[-6000:]
    assert "pure-Python twins" in warned[0]
    site = venv_python(fresh_venv, "import pybroker, pathlib; print(pathlib.Path(pybroker.__file__).parent)")
    assert site.returncode == 0, site.stderr
    assert not list(Path(site.stdout.strip(), "_native").glob("*.so"))

    probe = venv_python(fresh_venv, "import pybroker._native as n; print(n.HAVE_EXTENSIONS, n.records.__name__)")
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["False", "pybroker._pure.records"]
    lines = probe.stderr.strip().splitlines()
    assert len(lines) == 1 and "using the pure-Python twins" in lines[0], probe.stderr

    workdir = tmp_path / "run"
    workdir.mkdir()
    broker = run_installed_broker(fresh_venv, workdir)
    produce_and_consume(broker.bootstrap, "sdist-installed")
    assert broker.log().count("using the pure-Python twins") == 1, broker.log()[-3000:]
    assert broker.close() == 0, broker.log()[-3000:]
