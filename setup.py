"""Builds diskgnn and its native extension diskgnn._native.

io_uring support is compiled in when pkg-config finds the system liburing;
otherwise the extension is built without it and the reader falls back to
pread (``diskgnn.native_info()`` says which). The packer needs the xxHash
header (Debian: libxxhash-dev; `make setup` installs it), used header-only.
"""
import os
import shutil
import subprocess
import sys

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import find_packages, setup


def liburing_flags():
    if shutil.which("pkg-config") is None:
        return None
    try:
        cflags = subprocess.check_output(["pkg-config", "--cflags", "liburing"], text=True).split()
        libs = subprocess.check_output(["pkg-config", "--libs", "liburing"], text=True).split()
    except subprocess.CalledProcessError:
        return None
    return cflags, libs


def xxhash_cflags():
    """Compiler flags for <xxhash.h>: pkg-config's libxxhash where it has one, else the system include path."""
    if shutil.which("pkg-config") is not None:
        try:
            return subprocess.check_output(["pkg-config", "--cflags", "libxxhash"], text=True,
                                           stderr=subprocess.DEVNULL).split()
        except subprocess.CalledProcessError:
            pass
    if any(os.path.isfile(os.path.join(d, "xxhash.h")) for d in ("/usr/include", "/usr/local/include")):
        return []
    sys.exit("setup.py: xxhash.h not found: install the xxHash headers (Debian/Ubuntu: apt-get install libxxhash-dev, "
             "or run make setup as root)")


NATIVE_SOURCES = [
    "native/aggregate.cc",
    "native/bindings.cc",
    "native/packer.cc",
    "native/pread_engine.cc",
    "native/read_engine.cc",
    "native/read_plan.cc",
    "native/reader.cc",
    "native/sampler.cc",
    "native/uring_engine.cc",
    "native/uring_support.cc",
]

uring = liburing_flags()
compile_args = ["-O3", "-Wall", "-Wextra", *xxhash_cflags()]
link_args = []
macros = []
if uring is not None:
    compile_args += uring[0]
    link_args += uring[1]
    macros.append(("DISKGNN_HAVE_LIBURING", "1"))

ext = Pybind11Extension(
    "diskgnn._native",
    NATIVE_SOURCES,
    cxx_std=17,
    include_dirs=["native"],
    define_macros=macros,
    extra_compile_args=compile_args,
    extra_link_args=link_args + ["-pthread"],
)

setup(
    name="diskgnn",
    version="0.1.0",
    description="Out-of-core GNN training: offline sampling, batched packing, io_uring feature reads",
    packages=find_packages(include=["diskgnn", "diskgnn.*"]),
    python_requires=">=3.10",
    install_requires=["numpy>=1.24", "tqdm", "PyYAML", "xxhash"],
    extras_require={
        "torch": ["torch>=2.1"],
        "zarr": ["zarr>=2.16"],
        "gpu": ["kvikio-cu12"],
    },
    ext_modules=[ext],
    cmdclass={"build_ext": build_ext},
    zip_safe=False,
)
