"""Build the compiled hot paths (pyx/ + csrc/) into pybroker._native.*.

Toggles (environment):
  PYBROKER_DEBUG=1     -O0, assertions and Cython line tracing off/boundscheck on
  PYBROKER_ANNOTATE=1  write Cython HTML annotation next to each .pyx
  PYBROKER_SANITIZE=1  build with -fsanitize=address,undefined
  PYBROKER_REQUIRE_EXTENSIONS=1  a failing compiler fails the build (tools/build_wheels.sh sets
                       it: a release wheel without its compiled modules is a mistake)
  PYBROKER_LIMITED_API=1  build against CPython's limited API (Py_LIMITED_API 3.11, `.abi3.so`,
                       a cp311-abi3 wheel); off by default: it costs speed on the hot paths
                       (bench/README.md, "Limited API (abi3)")
Builds keep symbols and frame pointers so `perf record -g` names native frames; release wheels
are stripped by `auditwheel repair --strip` (tools/build_wheels.sh).

Without a working C compiler (an sdist installed on a machine without gcc), the build prints one
warning line and installs the package without compiled modules: pybroker._native then picks the
pure-Python twins (pybroker/_pure) by itself.
"""

import os
import sys

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

DEBUG = os.environ.get("PYBROKER_DEBUG") == "1"
ANNOTATE = os.environ.get("PYBROKER_ANNOTATE") == "1"
SANITIZE = os.environ.get("PYBROKER_SANITIZE") == "1"
LIMITED_API = os.environ.get("PYBROKER_LIMITED_API") == "1"
REQUIRE_EXTENSIONS = os.environ.get("PYBROKER_REQUIRE_EXTENSIONS") == "1"

cflags = ["-g", "-fno-omit-frame-pointer", "-O0" if DEBUG else "-O3", "-std=c11"]
ldflags = ["-g"]
if SANITIZE:
    cflags += ["-fsanitize=address,undefined"]
    ldflags += ["-fsanitize=address,undefined"]
macros = [("Py_LIMITED_API", "0x030B0000")] if LIMITED_API else []

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
        define_macros=macros,
        py_limited_api=LIMITED_API,
    )


class OptionalBuildExt(build_ext):
    """build_ext that leaves the compiled modules out, with one warning line, when compiling fails.

    Why: the pure-Python twins make the package complete (slower), so an sdist installed where no C
    compiler works still installs. Only a missing or failing compiler is caught (distutils' compile
    and link errors, or the compiler not being found); a Cython error fails the build as before.
    """

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # CompileError, LinkError, DistutilsExecError, PlatformError, OSError
            if REQUIRE_EXTENSIONS or not isinstance(exc, OSError) and not any(
                    cls.__name__ in _COMPILER_ERRORS for cls in type(exc).__mro__):
                raise
            reason = " ".join(str(exc).split()) or type(exc).__name__
            sys.stderr.write(
                "WARNING: pybroker: C extensions not built (no working C compiler: "
                f"{reason}); installing the pure-Python twins (slower)\n"
            )
            self.extensions = []

    def get_outputs(self) -> list[str]:
        return super().get_outputs() if self.extensions else []


_COMPILER_ERRORS = {"CompileError", "LinkError", "CCompilerError", "DistutilsExecError",
                    "DistutilsPlatformError", "PlatformError", "ExecError"}

extensions = [
    ext("crc32c", ["pyx/crc32c.pyx", "csrc/crc32c.c"]),
    ext("records", ["pyx/records.pyx", "csrc/crc32c.c"]),
    ext("index", ["pyx/index.pyx"]),
    ext("zerocopy", ["pyx/zerocopy.pyx"]),
    ext("timingwheel", ["pyx/timingwheel.pyx"]),
    ext("arrow_records", ["pyx/arrow_records.pyx"]),
    ext("recovery", ["pyx/recovery.pyx", "csrc/crc32c.c"]),
]

setup(
    ext_modules=cythonize(extensions, compiler_directives=directives, annotate=ANNOTATE),
    cmdclass={"build_ext": OptionalBuildExt},
    # one cp311-abi3 wheel for every CPython >= 3.11 when built on the limited API
    options={"bdist_wheel": {"py_limited_api": "cp311"}} if LIMITED_API else {},
)
