"""The e2e benchmarks' client allocator choice (issue 11, item 5): `--client-malloc` preloads
tcmalloc or jemalloc into the load generator, and a name that is unknown or not installed stops
the run with one line and exit 2 before any broker starts."""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# bench/e2e/run.py under its own name: no `run` module on sys.path for other suites to find
_spec = importlib.util.spec_from_file_location("bench_e2e_run", REPO / "bench" / "e2e" / "run.py")
assert _spec is not None and _spec.loader is not None
e2e = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = e2e  # its dataclasses look their module up there
_spec.loader.exec_module(e2e)


@pytest.fixture(autouse=True)
def _fresh_library_lookup():
    e2e._find_library.cache_clear()  # each test patches find_library its own way
    yield
    e2e._find_library.cache_clear()


def script(args):
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_an_unknown_allocator_exits_2_with_one_line_before_starting_anything():
    for args in (["bench/e2e/consume.py", "--client-malloc", "glibc,nope"],
                 ["bench/e2e/run.py", "--client-malloc", "nope"]):
        proc = script(args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert proc.stdout == ""
        assert proc.stderr.startswith("bench: unknown client allocator 'nope'"), proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_missing_allocator_library_names_the_package_to_install(monkeypatch, capsys):
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    with pytest.raises(SystemExit) as exc:
        e2e.client_malloc_env("tcmalloc")
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "apt-get install libtcmalloc-minimal4" in err


def test_glibc_inherits_the_environment_and_tcmalloc_is_preloaded(monkeypatch):
    assert e2e.client_malloc_env("glibc") is None
    monkeypatch.setattr(ctypes.util, "find_library",
                        lambda name: "libtcmalloc_minimal.so.4" if name == "tcmalloc_minimal" else None)
    env = e2e.client_malloc_env("tcmalloc")
    assert env is not None and env["LD_PRELOAD"] == "libtcmalloc_minimal.so.4"
    assert env["PATH"] == os.environ["PATH"]
