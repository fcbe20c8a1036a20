"""Build the compiled hot paths (pyx/ + csrc/) into pybroker._native.*.

Toggles (environment):
  PYBROKER_DEBUG=1     -O0, assertions and Cython line tracing off/boundscheck on
  PYBROKER_ANNOTATE=1  write Cython HTML annotation next to each .pyx
  PYBROKER_SANITIZE=1  build with -fsanitize=address,undefined
Release builds keep symbols and frame pointers so `perf record -g` names native frames.
"""

import os

from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("PYBROKER_DEBUG") == "1"
ANNOTATE = os.environ.get("PYBROKER_ANNOTATE") == "1"
SANITIZE = os.environ.get("PYBROKER_SANITIZE") == "1"

cflags = ["-g", "-fno-omit-frame-pointer", "-O0" if DEBUG else "-O3", "-std=c11"]
ldflags = ["-g"]
if SANITIZE:
    cflags += ["-fsanitize=address,undefined"]
    ldflags += ["-fsanitize=address,undefined"]

directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": False,
    "cdivision": True,
    "initializedcheck": DEBUG,
    "embedsignature": True,
}


def ext(name: str, sources: list[str]) -> Extension:
    return Extension(
        f"pybroker._native._{name}",
        sources=sources,
        include_dirs=["csrc", "pyx"],
        extra_compile_args=cflags,
        extra_link_args=ldflags,
    )


extensions = [
    ext("crc32c", ["pyx/crc32c.pyx", "csrc/crc32c.c"]),
    ext("records", ["pyx/records.pyx", "csrc/crc32c.c"]),
    ext("index", ["pyx/index.pyx"]),
    ext("zerocopy", ["pyx/zerocopy.pyx"]),
    ext("timingwheel", ["pyx/timingwheel.pyx"]),
    ext("arrow_records", ["pyx/arrow_records.pyx"]),
    ext("recovery", ["pyx/recovery.pyx", "csrc/crc32c.c"]),
]

setup(ext_modules=cythonize(extensions, compiler_directives=directives, annotate=ANNOTATE))
