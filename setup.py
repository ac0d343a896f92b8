"""Builds diskgnn's native extension diskgnn._native; the metadata is in pyproject.toml.

io_uring support is compiled in when the system's liburing is found (pkg-config,
else its header and library in the usual places); otherwise the extension is
built without it, the build says so, and the reader uses pread
(``diskgnn.native_info()`` tells which). The packer needs the xxHash header
(Debian: libxxhash-dev), used header-only. The system checks run when the
extension is compiled, so an sdist builds anywhere.
"""
import os
import shutil
import subprocess
import sys
import sysconfig

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import setup

NATIVE_SOURCES = [
    "native/aggregate.cc",
    "native/assemble.cc",
    "native/bindings.cc",
    "native/dropout.cc",
    "native/hag.cc",
    "native/packer.cc",
    "native/pread_engine.cc",
    "native/read_engine.cc",
    "native/read_plan.cc",
    "native/reader.cc",
    "native/sampler.cc",
    "native/uring_engine.cc",
    "native/uring_support.cc",
]
# CPATH's directories too: `make gpu-check` unpacks a carried libxxhash-dev there on machines without apt.
SYSTEM_INCLUDES = ("/usr/include", "/usr/local/include", *filter(None, os.environ.get("CPATH", "").split(":")))


def pkg_config(*args):
    """pkg-config's answer split into words, or None where it has none."""
    if shutil.which("pkg-config") is None:
        return None
    try:
        return subprocess.check_output(["pkg-config", *args], text=True, stderr=subprocess.DEVNULL).split()
    except subprocess.CalledProcessError:
        return None


def has_header(name):
    return any(os.path.isfile(os.path.join(d, name)) for d in SYSTEM_INCLUDES)


def stop(message):
    """One line naming what to install, instead of a compiler's page of errors."""
    sys.exit(f"diskgnn build: {message}")


def liburing_flags():
    """(cflags, libs) for liburing, or None to build without io_uring."""
    cflags, libs = pkg_config("--cflags", "liburing"), pkg_config("--libs", "liburing")
    if cflags is not None and libs is not None:
        return cflags, libs
    if has_header("liburing.h"):
        return [], ["-luring"]
    return None


class BuildNative(build_ext):
    """pybind11's build_ext, with the system checks and the optional io_uring."""

    def build_extensions(self):
        compiler = self.compiler.compiler_so[0] if self.compiler.compiler_so else "c++"
        if shutil.which(compiler) is None:
            stop(f"no C++ compiler ({compiler}) found: install one (Debian/Ubuntu: apt-get install g++)")
        if not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
            version = f"{sys.version_info.major}.{sys.version_info.minor}"
            stop(f"Python.h not found: install Python's headers (Debian/Ubuntu: apt-get install python{version}-dev)")
        xxhash = pkg_config("--cflags", "libxxhash")
        if xxhash is None:
            if not has_header("xxhash.h"):
                stop("xxhash.h not found: install the xxHash headers (Debian/Ubuntu: apt-get install libxxhash-dev)")
            xxhash = []
        uring = liburing_flags()
        if uring is None:
            print("diskgnn build: liburing not found: building without io_uring, the reader will use pread "
                  "(install liburing-dev for io_uring)", file=sys.stderr)
        for ext in self.extensions:
            ext.extra_compile_args += xxhash
            if uring is not None:
                ext.extra_compile_args += uring[0]
                ext.extra_link_args += uring[1]
                ext.define_macros.append(("DISKGNN_HAVE_LIBURING", "1"))
        super().build_extensions()


# Compiles the sources on every core (DISKGNN_BUILD_JOBS caps it).
ParallelCompile("DISKGNN_BUILD_JOBS").install()

setup(
    ext_modules=[
        Pybind11Extension(
            "diskgnn._native",
            NATIVE_SOURCES,
            cxx_std=17,
            include_dirs=["native"],
            extra_compile_args=["-O3", "-Wall", "-Wextra"],
            extra_link_args=["-pthread"],
        )
    ],
    cmdclass={"build_ext": BuildNative},
)
