# Front door: `make run` and `make test` work on a fresh machine.
# Every target is idempotent; stamps make repeated calls fast.

PYTHON  ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
EXT     := build/.native-built
URING   := build/liburing.state
NATIVE  := $(wildcard native/*.cc native/*.h)
CXX     ?= g++
CXXFLAGS_NATIVE := -std=c++17 -O2 -g -Wall -Wextra -Inative -pthread
LIB_SRC := $(filter-out native/bindings.cc,$(wildcard native/*.cc))

# Keep compiled objects between runs (they are pattern-rule intermediates).
.SECONDARY:

.PHONY: setup run test test-deps test-python test-native asan bench bench-deps bench-smoke gpu-wheels gpu-check clean distclean native-deps

setup: $(EXT)

# Installs Debian's liburing-dev and libxxhash-dev when missing (root + apt
# only), then records which liburing and xxHash the build sees so that the
# extension is rebuilt when they change. The packer needs xxhash.h.
native-deps:
	@mkdir -p build
	@if ! pkg-config --exists liburing 2>/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "setup: installing liburing-dev for the io_uring reader"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq liburing-dev pkg-config) >build/apt.log 2>&1 \
	      || echo "setup: apt-get failed (see build/apt.log): the pread fallback will be used"; \
	  else \
	    echo "setup: liburing not found and not root with apt: building without io_uring; the pread fallback will be used"; \
	  fi; \
	fi
	@if ! pkg-config --exists libxxhash 2>/dev/null && [ ! -f /usr/include/xxhash.h ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "setup: installing libxxhash-dev for the packer's checksums"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libxxhash-dev) >build/apt-xxhash.log 2>&1 \
	      || echo "setup: apt-get failed (see build/apt-xxhash.log): the build needs xxhash.h"; \
	  else \
	    echo "setup: xxhash.h not found and not root with apt: install libxxhash-dev (the build needs it)"; \
	  fi; \
	fi
	@state="$$(pkg-config --modversion liburing 2>/dev/null || echo none) xxhash $$(pkg-config --modversion libxxhash 2>/dev/null || echo none)"; \
	  [ -f $(URING) ] && [ "$$(cat $(URING))" = "$$state" ] || echo "$$state" > $(URING)

$(URING): native-deps

# pyproject.toml says what diskgnn needs (build requirements, dependencies, the
# test extra); constraints.txt pins the versions installed here.
BUILD_REQUIRES = $(VPY) -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['build-system']['requires']))"
PIP := $(VPY) -m pip install -q --disable-pip-version-check -c constraints.txt

$(EXT): pyproject.toml constraints.txt setup.py $(NATIVE) $(URING)
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(PIP) $$($(BUILD_REQUIRES))
	$(PIP) --no-build-isolation -e '.[test]'
	@$(VPY) -c "import diskgnn; print('setup: native extension built;', diskgnn.native_info())"
	@touch $@

# The main job: `python -m diskgnn.train` with no arguments prepares the
# built-in synthetic dataset once (under $DISKGNN_HOME, default
# ~/.cache/diskgnn) and trains on it end to end.
run: setup
	$(VPY) -m diskgnn.train

test: setup test-deps
	@$(MAKE) --no-print-directory test-native
	$(VPY) -m pytest -q tests

# The fault tests mirror files through FUSE (bench/harness/faultfs.py): libfuse2 for fusepy, installed when missing
# (root + apt only); without it those tests skip and say why.
test-deps:
	@if ! ldconfig -p 2>/dev/null | grep -q 'libfuse.so.2'; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "test: installing libfuse2 for the fault-injection tests"; \
	    mkdir -p build; (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfuse2) \
	      >build/apt-fuse.log 2>&1 || echo "test: apt-get failed (see build/apt-fuse.log): the FUSE tests will skip"; \
	  fi; \
	fi

test-python: setup
	$(VPY) -m pytest -q tests

# Native unit tests: exit 0 pass, 1 fail, 77 skip (liburing's convention). The
# library objects are compiled once per flavour (plain, asan) and linked into
# every test. Run through a sub-make after setup, so that flags see a liburing
# that setup has just installed.
URING_CFLAGS = $(shell pkg-config --exists liburing 2>/dev/null && echo -DDISKGNN_HAVE_LIBURING $$(pkg-config --cflags liburing))
URING_LIBS = $(shell pkg-config --libs liburing 2>/dev/null)
HEADERS := $(wildcard native/*.h)
FLAVOUR ?= plain
ifeq ($(FLAVOUR),asan)
FLAVOUR_FLAGS := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer
else
FLAVOUR_FLAGS :=
endif
OBJ_DIR := build/native-$(FLAVOUR)
LIB_OBJ := $(patsubst native/%.cc,$(OBJ_DIR)/%.o,$(LIB_SRC))
TEST_BIN := $(patsubst native/tests/%.cc,$(OBJ_DIR)/tests/%,$(wildcard native/tests/*.cc))

$(OBJ_DIR)/%.o: native/%.cc $(HEADERS) $(URING)
	@mkdir -p $(OBJ_DIR)
	$(CXX) $(CXXFLAGS_NATIVE) $(FLAVOUR_FLAGS) $(URING_CFLAGS) -c -o $@ $<

$(OBJ_DIR)/tests/%: native/tests/%.cc $(LIB_OBJ) $(wildcard native/tests/*.h)
	@mkdir -p $(OBJ_DIR)/tests
	$(CXX) $(CXXFLAGS_NATIVE) $(FLAVOUR_FLAGS) $(URING_CFLAGS) -o $@ $< $(LIB_OBJ) $(URING_LIBS)

test-native: $(URING) $(TEST_BIN)
	@bash native/tests/run.sh $(TEST_BIN)

asan: $(URING)
	@$(MAKE) --no-print-directory test-native FLAVOUR=asan

# The report (docs/benchmarks.md's generated section and docs/bench/*.png):
# device limits, the epoch grid (3 whole epochs per system, evaluated) against DGL/GraphBolt, PyG,
# an installed MariusGNN or Ginex (DISKGNN_MARIUS, DISKGNN_GINEX; docs/peers.md) and a naive loop at
# 1, 2 and 4 GiB caps, scaling (5 runs per scale); two to three hours on 2 cores by estimate, most of it the
# peers' capped runs, each stopped after 10 minutes. bench-deps installs fio, PyG (its sampler's
# torch-sparse and torch-scatter are built from source once, 12 to 40 minutes measured here, and
# cached) and DGL 2.1.0 in a venv of its own under $DISKGNN_HOME/peers (about 5 GB, 2 minutes);
# where one fails, its rows say why.
bench: setup bench-deps
	$(VPY) -m bench.suite

bench-deps: setup
	@command -v fio >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  echo "bench: installing fio for the device limits" && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio) >build/apt-fio.log 2>&1; } \
	  || echo "bench: fio is not installed (see build/apt-fio.log): the report says so"
	@$(VPY) -m bench.peers.pyg --install || echo "bench: PyG could not be installed: its rows will say why"
	@$(VPY) -m bench.peers.dgl --install || echo "bench: DGL could not be installed: its rows will say why"

bench-smoke: setup
	$(VPY) -m pytest -q tests/bench/test_bench_smoke.py

# The GPU machine's one command, with no network there: `make gpu-check` (GPU_LOGS=DIR keeps the logs there).
# It uses that machine's python3, whose torch, CuPy, pytest and torch_geometric it needs; what the machine
# lacks travels in .whl/ (never committed; `make gpu-wheels` fills it where apt and pip reach their
# registries: the xxHash header the packer compiles against and liburing for the io_uring reader, as Debian's
# packages). It builds the native extension in place, runs `python -m bench gpu` on W1 (8M nodes, prepared
# there in about a minute) out of core at a 2 GiB host budget with device caches 0, 256 MiB and all rows,
# then the CUDA tests and the store's and loaders' tests on the GPU (GPU_TESTS narrows them), each part
# under a time limit so that the whole fits one 10-minute call, and prints one summary.
GPU_PY    ?= python3
GPU_LOGS  ?= build/gpu
GPU_TESTS ?= tests/cuda tests/target tests/bench/test_bench_gpu_smoke.py tests/store tests/loading
GPU_BENCH ?= --nodes 8000000 --budget 2GiB --device-caches 0,256MiB,all --batches 30
GPU_LIB   := $(CURDIR)/build/gpu/root/usr/lib/x86_64-linux-gnu
GPU_ENV   := CPATH=$(CURDIR)/build/gpu/root/usr/include LIBRARY_PATH=$(GPU_LIB) LD_LIBRARY_PATH=$(GPU_LIB) \
             PYTHONPATH=$(CURDIR)/build/gpu/site:$(CURDIR)

gpu-wheels:
	@mkdir -p .whl
	cd .whl && apt-get download libxxhash-dev liburing-dev liburing2
	@echo "gpu-wheels: carry .whl/ with the tree (it is git-ignored) and run make gpu-check there"

gpu-check:
	@mkdir -p build/gpu/root build/gpu/site $(GPU_LOGS)
	@for f in .whl/*.deb; do [ -e "$$f" ] && dpkg -x "$$f" build/gpu/root; done; true
	@for f in .whl/*.whl; do [ -e "$$f" ] && $(GPU_PY) -m pip install -q --no-index --no-deps --target build/gpu/site "$$f"; done; true
	$(GPU_ENV) $(GPU_PY) setup.py -q build_ext --inplace > $(GPU_LOGS)/build.log 2>&1 || { tail -20 $(GPU_LOGS)/build.log; exit 1; }
	@$(GPU_PY) -c "import torch; print('gpu-check:', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'NO CUDA DEVICE')"
	-$(GPU_ENV) timeout 330 $(GPU_PY) -m bench.gpu $(GPU_BENCH) --out $(GPU_LOGS)/gpu.json --report $(GPU_LOGS)/gpu.md \
	  > $(GPU_LOGS)/bench.log 2>&1
	-$(GPU_ENV) timeout 200 $(GPU_PY) -m pytest -q -rfEs -p no:cacheprovider $(GPU_TESTS) > $(GPU_LOGS)/tests.log 2>&1
	@echo "== gpu-check summary"; grep -E "SKIPPED|FAILED|ERROR" $(GPU_LOGS)/tests.log | head -30; tail -1 $(GPU_LOGS)/tests.log
	@cat $(GPU_LOGS)/gpu.md 2>/dev/null || tail -5 $(GPU_LOGS)/bench.log

clean:
	rm -rf build diskgnn/_native*.so *.egg-info
	find . -name __pycache__ -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
