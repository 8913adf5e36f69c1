# terarec: one non-recursive Makefile.
#
#   make                 all libraries and binaries into build/ (binaries in build/bin/)
#   make test            every CPU test (unit, kernel parity, golden, integration);
#                        ends with "total: N passed, N failed, N skipped"
#   make check-headers   each header compiles on its own
#   make check-cuda      kernels/kmath.h as C11 and as CUDA, every .cu file (compile + link)
#   make SANITIZE=address,undefined test
#   make deps            installs the Debian packages that are missing (prints them)
#   make run             the main job: terarec train (a local training run on synthetic data)
#   make bench           builds the benchmarks (run them from bench/)
#   make bundle          build/bundle/: the binaries and the shared libraries they need, relocatable
#                        (RUNPATH $ORIGIN/../lib), for GPU nodes without the -dev packages, and
#                        Open MPI + PMIx relocated into it (bin/mpirun, env.sh) for nodes without
#                        them; BUNDLE_CUDA=0 leaves out the CUDA toolkit's libraries, BUNDLE_MPI=0 Open MPI
#   make gpu-check       tools/gpu_check.sh's stages on this build (GPU): probe, kernel tests,
#                        t8001, NCCL on a world of 1, compute-sanitizer, speed against PyTorch
#   make sanitize-cuda   only its compute-sanitizer stage (memcheck, racecheck) (GPU)
#   make test-unit       only the test binaries (unit, kernel parity, golden), no integration scripts
#   make install         the programs into $(DESTDIR)$(PREFIX)/bin, the CUDA plugin (when built) into
#                        .../lib (PREFIX=/usr/local); they find each other there
#   make deps-build      installs only the packages needed to build (the container images' first layer)
#   make image-cpu       the CPU container image terarec:VERSION-cpu (containers/Dockerfile.cpu), on a
#                        Debian 12 base made here (BASE_IMAGE= another; containers/README.md)
#   make image           the GPU container image terarec:VERSION (containers/Dockerfile; needs NVIDIA's
#                        CUDA apt repository); see containers/README.md
#   make help            the targets a user needs, one line each
#
# Knobs: V=1 (echo commands), DEVELOPER=1 (-Werror), BLAS=dnnl|openblas|blis,
# CUDA=0 / NCCL=0 (force off), ARCH= (CPU flags; default x86-64-v3 on x86_64),
# PREFIX= / DESTDIR= (install), CONTAINER_ENGINE=podman|docker, BASE_IMAGE= and
# IMAGE_BUILD_ARGS= (image targets).

.DEFAULT_GOAL := all
SHELL := /bin/bash

CC ?= cc
ifeq ($(CC),cc)
CC := gcc
endif
BUILD := build
BIN := $(BUILD)/bin
V ?= 0
DEVELOPER ?= 0
BLAS ?= dnnl
SANITIZE ?=

VERSION := 0.1.0
GIT_HASH := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
MACHINE := $(shell uname -m)

ifeq ($(MACHINE),x86_64)
ARCH ?= -march=x86-64-v3
else
ARCH ?=
endif

# ---- optional CUDA / NCCL, detected ------------------------------------------
NVCC ?= $(shell command -v nvcc 2>/dev/null)
CUDA_HOME ?= $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(NVCC)),/usr/local/cuda)
CUDA ?= $(if $(NVCC),1,0)
NCCL_HOME ?= $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h))
NCCL ?= $(if $(and $(filter 1,$(CUDA)),$(NCCL_HOME)),1,0)
NVCC_GENCODE ?= -gencode arch=compute_90,code=sm_90

# ---- flags ---------------------------------------------------------------------
WARN := -Wall -Wextra -Wvla -Wstrict-prototypes -Wmissing-prototypes -Wshadow -Wformat=2 -fno-common
ifeq ($(DEVELOPER),1)
WARN += -Werror
endif
OPT ?= -O2
CFLAGS := -std=c11 $(OPT) -g $(ARCH) $(WARN) -fopenmp -fno-math-errno -ffp-contract=fast -MMD -MP
CPPFLAGS := -D_DEFAULT_SOURCE -DTR_VERSION='"$(VERSION)"' -I$(BUILD)/gen
LDFLAGS := -fopenmp
LDLIBS := -lmicrohttpd -lcurl -ljansson -lyaml -lxxhash -lsqlite3 -lz -lm -lpthread
# the run history's charts (db/plot.c; fontconfig only to release its caches after a chart)
CPPFLAGS += $(shell pkg-config --cflags cairo fontconfig)
LDLIBS += $(shell pkg-config --libs cairo fontconfig)

ifeq ($(BLAS),dnnl)
CPPFLAGS += -DTR_BLAS_DNNL=1
LDLIBS += -ldnnl
else ifeq ($(BLAS),openblas)
CPPFLAGS += -DTR_BLAS_OPENBLAS=1 -I/usr/include/$(MULTIARCH)/openblas-openmp
LDLIBS += -L/usr/lib/$(MULTIARCH)/openblas-openmp -Wl,-rpath,/usr/lib/$(MULTIARCH)/openblas-openmp -lopenblas
else ifeq ($(BLAS),blis)
CPPFLAGS += -DTR_BLAS_BLIS=1
LDLIBS += -L/usr/lib/$(MULTIARCH)/blis-openmp -Wl,-rpath,/usr/lib/$(MULTIARCH)/blis-openmp -lblis
else
$(error BLAS must be dnnl, openblas or blis, not '$(BLAS)')
endif

ifneq ($(SANITIZE),)
ifneq ($(and $(findstring address,$(SANITIZE)),$(findstring thread,$(SANITIZE))),)
$(error SANITIZE: address and thread cannot be combined)
endif
CFLAGS += -fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer
CPPFLAGS += -DTR_SANITIZE='"$(SANITIZE)"'
LDFLAGS += -fsanitize=$(SANITIZE)
endif

# ---- optional MPI and PMIx, detected through pkg-config (MPI=0 / PMIX=0 force them off)
MPI ?= $(shell pkg-config --exists ompi-c 2>/dev/null && echo 1 || echo 0)
PMIX ?= $(shell pkg-config --exists pmix 2>/dev/null && echo 1 || echo 0)
ifeq ($(MPI),1)
CPPFLAGS += -DTR_HAVE_MPI=1 $(shell pkg-config --cflags ompi-c)
LDLIBS += $(shell pkg-config --libs ompi-c)
endif
ifeq ($(PMIX),1)
CPPFLAGS += -DTR_HAVE_PMIX=1 $(shell pkg-config --cflags pmix)
LDLIBS += $(shell pkg-config --libs pmix)
endif

ifeq ($(CUDA),1)
# The CUDA backend is a plugin, $(BUILD)/lib/libterarec-cuda.so, that the backend
# registry loads only where an NVIDIA device node exists: programs on CPU nodes never
# map cuBLAS (540 MB of it) and run without the CUDA libraries installed. The plugin
# calls back into the program (logging, allocator): the programs export exactly those
# symbols (kernels/cuda/plugin.dynlist), and look for the plugin in lib/ beside
# their bin/ (a bundle), then in this build's lib/ (kernels/backend.c).
CPPFLAGS += -DTR_HAVE_CUDA=1 -isystem $(CUDA_HOME)/include -DTR_CUDA_PLUGIN='"libterarec-cuda.so"' \
  -DTR_CUDA_PLUGIN_DIR='"$(abspath $(BUILD))/lib"'
CUDA_PLUGIN := $(BUILD)/lib/libterarec-cuda.so
CUDA_DYNLIST := kernels/cuda/plugin.dynlist
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart
LDFLAGS += -Wl,--dynamic-list=$(CUDA_DYNLIST) -Wl,-rpath,'$$ORIGIN/../lib' -Wl,-rpath,$(abspath $(BUILD))/lib
LDLIBS += -ldl
# tests of the CUDA and NCCL check macros call the runtimes themselves (linked as needed)
TEST_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart $(if $(filter 1,$(NCCL)),-lnccl)
endif
ifeq ($(NCCL),1)
# the NCCL communicator (worker/comm_nccl.c) lives in the CUDA plugin, which links
# -lnccl; the worker finds it with dlsym (worker/comm.c)
CPPFLAGS += -DTR_HAVE_NCCL=1 -isystem $(dir $(NCCL_HOME))
NCCL_OBJ := $(BUILD)/obj/plugin/worker/comm_nccl.o
CUDA_LIBS += -lnccl
endif
CPPFLAGS += -DTR_BLAS_NAME='"$(BLAS)"'

ifeq ($(V),1)
Q :=
QUIET_CC =
QUIET_AR =
QUIET_LINK =
QUIET_NVCC =
else
Q := @
QUIET_CC = @echo "  CC      $@";
QUIET_AR = @echo "  AR      $@";
QUIET_LINK = @echo "  LINK    $@";
QUIET_NVCC = @echo "  NVCC    $@";
endif

# Objects depend on the flags they were built with (a changed knob rebuilds), and
# the git hash lives in a generated header that changes only when HEAD does.
# (targets that compile nothing leave them alone: make help, make -n image-cpu)
NO_BUILD_GOALS := clean deps deps-build deps-bench help image image-cpu image-base
ifeq ($(filter $(NO_BUILD_GOALS),$(MAKECMDGOALS)),)
FLAGS_LINE := $(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $(LDLIBS)
$(shell mkdir -p $(BUILD)/gen; echo '$(subst ','\'',$(FLAGS_LINE))' | cmp -s - $(BUILD)/gen/flags || echo '$(subst ','\'',$(FLAGS_LINE))' > $(BUILD)/gen/flags)
$(shell echo '#define TR_GIT_HASH "$(GIT_HASH)"' | cmp -s - $(BUILD)/gen/version_gen.h || echo '#define TR_GIT_HASH "$(GIT_HASH)"' > $(BUILD)/gen/version_gen.h)
endif

ifeq ($(filter $(NO_BUILD_GOALS),$(MAKECMDGOALS)),)
$(info terarec $(VERSION) ($(GIT_HASH)): blas=$(BLAS) mpi=$(MPI) pmix=$(PMIX) cuda=$(CUDA) nccl=$(NCCL) nvcc=$(or $(NVCC),none) sanitize=$(or $(SANITIZE),none))
endif

# ---- sources ---------------------------------------------------------------------
COMMON_SRCS := $(wildcard common/*.c)
KERN_SRCS := $(wildcard kernels/*.c kernels/cpu/*.c)
KERN_CU_SRCS := $(if $(filter 1,$(CUDA)),$(wildcard kernels/cuda/*.cu))
LOADER_SRCS := $(filter-out loader_svc/main.c,$(wildcard loader_svc/*.c))
PREPARE_SRCS := $(wildcard prepare/*.c)
WORKER_SRCS := $(filter-out worker/main.c worker/comm_nccl.c,$(wildcard worker/*.c))
LAUNCHER_SRCS := $(filter-out launcher/main.c,$(wildcard launcher/*.c))
CKPT_SRCS := $(filter-out ckpt_store/main.c,$(wildcard ckpt_store/*.c))
DB_SRCS := $(wildcard db/*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

LIBCOMMON := $(BUILD)/libcommon.a
LIBKERNELS := $(BUILD)/libkernels.a
LIBLOADER := $(BUILD)/libloader.a
LIBPREPARE := $(BUILD)/libprepare.a
LIBWORKER := $(BUILD)/libworker.a
LIBLAUNCHER := $(BUILD)/liblauncher.a
LIBCKPT := $(BUILD)/libckpt.a
LIBDB := $(BUILD)/libdb.a
# link order: dependents first
ALL_LIBS := $(LIBLAUNCHER) $(LIBDB) $(LIBWORKER) $(LIBCKPT) $(LIBPREPARE) $(LIBLOADER) $(LIBKERNELS) $(LIBCOMMON)

$(LIBCOMMON): $(call obj,$(COMMON_SRCS))
$(LIBKERNELS): $(call obj,$(KERN_SRCS))
$(LIBLOADER): $(call obj,$(LOADER_SRCS))
$(LIBPREPARE): $(call obj,$(PREPARE_SRCS))
$(LIBWORKER): $(call obj,$(WORKER_SRCS))
$(LIBLAUNCHER): $(call obj,$(LAUNCHER_SRCS))
$(LIBCKPT): $(call obj,$(CKPT_SRCS))
$(LIBDB): $(call obj,$(DB_SRCS)) $(BUILD)/obj/db/web_assets.o

$(BUILD)/%.a:
	@mkdir -p $(@D)
	$(QUIET_AR)rm -f $@ && ar rcs $@ $^

# kernels are loops the vectoriser must see through (-O2's cost model skips them)
$(BUILD)/obj/kernels/%.o: CFLAGS += -O3

$(BUILD)/obj/%.o: %.c $(BUILD)/gen/flags
	@mkdir -p $(@D)
	$(QUIET_CC)$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# the pages of `terarec runs serve` (db/web/) as C strings, so the binary needs no
# source tree at run time; two question marks in a row would be a C11 trigraph
WEB_ASSETS := db/web/app.js db/web/style.css
$(BUILD)/gen/web_assets.c: $(WEB_ASSETS) Makefile
	@mkdir -p $(@D)
	$(Q)if grep -n '??' $(WEB_ASSETS); then echo "db/web: '??' would be a C trigraph" >&2; exit 1; fi
	$(Q){ echo '/* generated from db/web/ by the Makefile: do not edit */'; echo '#include "db_internal.h"'; \
	  for f in $(WEB_ASSETS); do \
	    echo "const char db_web_$$(basename $$f | tr . _)[] ="; \
	    sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $$f; echo ';'; \
	  done; } > $@.tmp && mv $@.tmp $@

$(BUILD)/obj/db/web_assets.o: $(BUILD)/gen/web_assets.c $(BUILD)/gen/flags
	@mkdir -p $(@D)
	$(QUIET_CC)$(CC) $(CPPFLAGS) -I$(CURDIR)/db $(CFLAGS) -c $< -o $@

NVCCFLAGS := -std=c++17 -O2 $(NVCC_GENCODE) -Xcompiler -fPIC -Werror all-warnings
$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(@D)
	$(QUIET_NVCC)$(NVCC) $(NVCCFLAGS) $(CPPFLAGS) -MMD -MP -c $< -o $@

ifeq ($(CUDA),1)
# C files of the plugin: position-independent, beside the programs' own objects
$(BUILD)/obj/plugin/%.o: %.c $(BUILD)/gen/flags
	@mkdir -p $(@D)
	$(QUIET_CC)$(CC) $(CPPFLAGS) $(CFLAGS) -fPIC -c $< -o $@

$(CUDA_PLUGIN): $(patsubst %.cu,$(BUILD)/obj/%.o,$(KERN_CU_SRCS)) $(NCCL_OBJ) $(CUDA_DYNLIST)
	@mkdir -p $(@D)
	$(QUIET_LINK)$(CC) -shared -o $@ $(filter %.o,$^) $(CUDA_LIBS) -lstdc++ -lm
	@# every program symbol it calls must be one the programs export
	$(Q)missing=$$(nm -D --undefined-only $@ | awk '$$2 ~ /^(tr_|kern_|km_)/ {print $$2}' | \
	  while read -r sym; do grep -qw "$$sym" $(CUDA_DYNLIST) || echo "$$sym"; done); \
	  if [ -n "$$missing" ]; then echo "$@ needs" $$missing "from the programs: add to $(CUDA_DYNLIST)" >&2; \
	  rm -f $@; exit 1; fi
endif

BINS := $(BIN)/terarec-worker $(BIN)/terarec $(BIN)/terarec-loader $(if $(wildcard ckpt_store/main.c),$(BIN)/terarec-ckpt)

$(BIN)/terarec-ckpt: $(call obj,ckpt_store/main.c) $(ALL_LIBS)
	@mkdir -p $(@D)
	$(QUIET_LINK)$(CC) $(LDFLAGS) -o $@ $< $(ALL_LIBS) $(LDLIBS)

$(BIN)/terarec: $(call obj,launcher/main.c) $(ALL_LIBS)
	@mkdir -p $(@D)
	$(QUIET_LINK)$(CC) $(LDFLAGS) -o $@ $< $(ALL_LIBS) $(LDLIBS)

$(BIN)/terarec-worker: $(call obj,worker/main.c) $(ALL_LIBS)
	@mkdir -p $(@D)
	$(QUIET_LINK)$(CC) $(LDFLAGS) -o $@ $< $(ALL_LIBS) $(LDLIBS)

$(BIN)/terarec-loader: $(call obj,loader_svc/main.c) $(ALL_LIBS)
	@mkdir -p $(@D)
	$(QUIET_LINK)$(CC) $(LDFLAGS) -o $@ $< $(ALL_LIBS) $(LDLIBS)

# ---- tests -------------------------------------------------------------------------
TEST_SRCS := $(wildcard tests/unit/*/test_*.c tests/kernels/test_*.c tests/golden/test_*.c)
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(ALL_LIBS)
	@mkdir -p $(@D)
	$(QUIET_LINK)$(CC) $(LDFLAGS) -o $@ $< $(ALL_LIBS) $(LDLIBS) $(TEST_LDLIBS)

# LD_PRELOAD libraries for the fault tests (tests/integration/pmix_slow_modex.c for
# the SLURM ones, kill_after_latest.c): plain flags, no sanitizer, as they go into
# programs that are not their own
TEST_PRELOADS := $(BUILD)/tests/lib/kill_after_latest.so
ifeq ($(PMIX),1)
TEST_PRELOADS += $(BUILD)/tests/lib/pmix_slow_modex.so
endif
$(BUILD)/tests/lib/pmix_slow_modex.so: tests/integration/pmix_slow_modex.c
	@mkdir -p $(@D)
	$(QUIET_LINK)$(CC) -std=c11 -O2 -g -Wall -Wextra -fPIC -shared $(shell pkg-config --cflags pmix) -o $@ $< -ldl -lpthread
$(BUILD)/tests/lib/%.so: tests/integration/%.c
	@mkdir -p $(@D)
	$(QUIET_LINK)$(CC) -std=c11 -O2 -g -Wall -Wextra -Werror -fPIC -shared -o $@ $< -ldl

# ---- benchmarks --------------------------------------------------------------------
# one program per bench/*.c, but for the parts others link (bench_rows.c: bench_train's)
BENCH_PARTS := bench/bench_rows.c
BENCH_SRCS := $(filter-out $(BENCH_PARTS),$(wildcard bench/*.c))
BENCH_BINS := $(patsubst bench/%.c,$(BIN)/bench-%,$(BENCH_SRCS))

$(BIN)/bench-bench_train: $(BUILD)/obj/bench/bench_rows.o
$(BIN)/bench-%: $(BUILD)/obj/bench/%.o $(ALL_LIBS)
	@mkdir -p $(@D)
	$(QUIET_LINK)$(CC) $(LDFLAGS) -o $@ $< $(filter $(BUILD)/obj/bench/bench_rows.o,$^) $(ALL_LIBS) $(LDLIBS)

.PHONY: all test test-unit check-headers check-cuda deps deps-build deps-bench clean bench asan ubsan tsan tsan-bins test-gpu run fuzz bundle \
  sanitize-cuda gpu-check install image image-cpu image-base help
.SECONDARY:

all: $(BINS) $(CUDA_PLUGIN) $(TEST_BINS) $(TEST_PRELOADS) $(BENCH_BINS)

bench: $(BENCH_BINS)

# the main job: `terarec train` with no model flags, a local training run of the built-in
# demo model on synthetic data (its run history goes to the default file; TR_DB changes it)
run: $(BINS) $(CUDA_PLUGIN)
	$(BIN)/terarec train

# one test at a time unless TR_TEST_JOBS=N says otherwise (tests/run.sh): on CI's two
# cores two at once took the main pass from 17 to 15.5 minutes, and under that load
# t5002's checkpoint once missed SLURM's grace period
test: all
	$(Q)tests/run.sh $(BUILD)

test-gpu: all
	$(Q)TR_TEST_GPU=1 tests/run.sh $(BUILD)

test-unit: $(TEST_BINS) $(CUDA_PLUGIN)
	$(Q)TR_TEST_ONLY=bins tests/run.sh $(BUILD)

# the programs find each other beside /proc/self/exe (launcher/rundir.c) and the CUDA
# plugin in ../lib (kernels/backend.c; the RUNPATH has $ORIGIN/../lib too)
PREFIX ?= /usr/local
DESTDIR ?=
install: $(BINS) $(CUDA_PLUGIN)
	$(Q)install -d $(DESTDIR)$(PREFIX)/bin
	$(Q)install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
ifeq ($(CUDA),1)
	$(Q)install -d $(DESTDIR)$(PREFIX)/lib
	$(Q)install -m 755 $(CUDA_PLUGIN) $(DESTDIR)$(PREFIX)/lib/
endif
	@echo "install: $(notdir $(BINS) $(CUDA_PLUGIN)) into $(DESTDIR)$(PREFIX)"

# container images (containers/README.md): podman where it is installed, else docker.
# The base (BASE_IMAGE) is by default a Debian 12 made here, the one the tests build
# on: containers/base.sh makes it once with debootstrap --variant=minbase from the
# machine's Debian mirror (TR_DEBIAN_MIRROR; needs root), caches the tree in
# build/containers/ and imports it as localhost/terarec-base:debian12, so no registry
# is needed. BASE_IMAGE=debian:12 (or a site registry's Debian 12 image) builds on that
# instead, and skips base.sh. Where podman cannot run a container (a sandbox, nested
# containers), containers/build.sh builds with --isolation chroot and says so.
CONTAINER_ENGINE ?= $(or $(shell command -v podman 2>/dev/null),docker)
LOCAL_BASE_IMAGE := localhost/terarec-base:debian12
BASE_IMAGE ?= $(LOCAL_BASE_IMAGE)
IMAGE_ARGS = --build-arg BASE_IMAGE=$(BASE_IMAGE) --build-arg VERSION=$(VERSION) --build-arg GIT_HASH=$(GIT_HASH) \
  --build-arg BUILD_DATE=$(shell date -u +%Y-%m-%dT%H:%M:%SZ) $(IMAGE_BUILD_ARGS)
image-base:
ifeq ($(BASE_IMAGE),$(LOCAL_BASE_IMAGE))
	$(Q)containers/base.sh $(CONTAINER_ENGINE) $(LOCAL_BASE_IMAGE) $(BUILD)/containers
endif
image-cpu: image-base
	containers/build.sh $(CONTAINER_ENGINE) $(BASE_IMAGE) $(IMAGE_ARGS) -f containers/Dockerfile.cpu -t terarec:$(VERSION)-cpu .
image: image-base
	containers/build.sh $(CONTAINER_ENGINE) $(BASE_IMAGE) $(IMAGE_ARGS) -f containers/Dockerfile -t terarec:$(VERSION) .

# the targets a user needs, one line each (tests/integration/t0003-help.sh checks that
# each one named is a target of this file)
help:
	@echo 'terarec $(VERSION): make [TARGET] [KNOB=VALUE...]'
	@echo '  make deps            install the Debian packages that are missing (root or sudo; prints them)'
	@echo '  make                 build the programs (build/bin/), the test programs and the benchmarks'
	@echo '  make run             the demo: build/bin/terarec train, a short local training run on synthetic data'
	@echo '  make test            every CPU test; ends with "total: N passed, N failed, N skipped"'
	@echo '  make test-unit       only the test programs (unit, kernel parity, golden), no integration scripts'
	@echo '  make test-gpu        the tests with TR_TEST_GPU=1: a test that needs a GPU fails instead of skipping'
	@echo '  make install         the programs into PREFIX/bin (PREFIX=/usr/local, DESTDIR=)'
	@echo '  make bundle          build/bundle/: the programs and the libraries they load, Open MPI included, relocatable'
	@echo '  make image-cpu       the CPU container image terarec:$(VERSION)-cpu (BASE_IMAGE=: containers/README.md)'
	@echo '  make image           the GPU container image terarec:$(VERSION) (needs NVIDIA'"'"'s CUDA apt repository)'
	@echo '  make gpu-check       the GPU checks on this build: kernels, parity, NCCL, compute-sanitizer, speed (GPU)'
	@echo '  make check-headers   each header compiles alone'
	@echo '  make check-cuda      every CUDA source compiles and links (nvcc; no GPU needed)'
	@echo '  make bench           the benchmarks (build/bin/bench-*)'
	@echo '  make fuzz            the libFuzzer targets, FUZZ_SECONDS (60) each (clang)'
	@echo '  make clean           remove build/'
	@echo 'knobs: V=1 (commands), DEVELOPER=1 (-Werror), CUDA=0, MPI=0, PMIX=0, BLAS=dnnl|openblas|blis,'
	@echo '  SANITIZE=address,undefined; tests: TR_TEST_ONLY=REGEX, TR_TEST_EXCLUDE=REGEX, TR_TEST_JOBS=N'
	@echo 'the first run: make deps && make -j"$$(nproc)" && build/bin/terarec train (README.md)'

bundle: $(BINS) $(CUDA_PLUGIN)
	$(Q)tools/bundle.sh $(BUILD)/bundle $(BINS) $(CUDA_PLUGIN)

# the GPU checks of tools/gpu_check.sh on this build (needs a GPU): all its stages, or
# only the kernel tests under compute-sanitizer (memcheck on all, racecheck on the
# shared-memory kernels' tests); a report or a failure fails the target
gpu-check: all
	$(Q)tools/gpu_check.sh run --local
sanitize-cuda: all
	$(Q)tools/gpu_check.sh run --local --only sanitize

asan:
	$(MAKE) SANITIZE=address BUILD=build-asan test

# ThreadSanitizer over the tests whose code runs threads: the store's parallel chunk
# I/O and gc lock (test_store, test_client), the loader's ring (test_ring), the
# workers' beat thread (test_report), the table store's I/O threads (test_tier), the
# history's server (test_serve), and a real 2-worker `terarec train` with its store,
# async checkpoints and `runs serve` (t6004).
# OpenMP runs one thread (libgomp is not instrumented: its barriers look like races),
# and tests/tsan.supp names the reports inside libraries (Open MPI) it leaves out.
TSAN_TESTS := unit/ckpt_store/test_(store|client)|unit/loader_svc/test_ring|unit/worker/test_(report|tier)|unit/db/test_serve|integration/t6004-
tsan-bins: $(BINS) $(TEST_BINS) $(TEST_PRELOADS)
tsan:
	$(MAKE) SANITIZE=thread BUILD=build-tsan CUDA=0 tsan-bins
	$(Q)OMP_NUM_THREADS=1 TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp" TR_TEST_ONLY='$(TSAN_TESTS)' \
	  tests/run.sh build-tsan
ubsan:
	$(MAKE) SANITIZE=undefined BUILD=build-ubsan test

# every header compiles alone (as C11; headers used from CUDA are also checked by check-cuda)
HEADERS := $(wildcard common/*.h kernels/*.h kernels/cpu/*.h loader_svc/*.h prepare/*.h worker/*.h launcher/*.h ckpt_store/*.h db/*.h)
check-headers:
	$(Q)set -e; mkdir -p $(BUILD)/hdr; for h in $(HEADERS); do \
	  echo "#include \"$(CURDIR)/$$h\"" > $(BUILD)/hdr/t.c; \
	  $(CC) $(CPPFLAGS) -std=c11 $(WARN) -fsyntax-only $(BUILD)/hdr/t.c || { echo "header $$h does not compile alone"; exit 1; }; \
	done; echo "check-headers: $(words $(HEADERS)) headers ok"

# kmath.h as C11 (pedantic) and as CUDA; every .cu compiled (the build's own objects,
# NVCCFLAGS has -Werror all-warnings) and linked with cudart into a program
CU_SRCS := $(wildcard kernels/cuda/*.cu)
CU_OBJS := $(patsubst %.cu,$(BUILD)/obj/%.o,$(CU_SRCS))
check-cuda: $(LIBCOMMON) $(if $(filter 1,$(CUDA)),$(CU_OBJS))
	$(Q)$(CC) -std=c11 -Wall -Wextra -pedantic -Wstrict-prototypes -Wmissing-prototypes -Werror -fsyntax-only -x c kernels/kmath.h
	@echo "  kmath.h compiles as C11"
ifeq ($(CUDA),1)
	$(Q)mkdir -p $(BUILD)/cuda
	$(QUIET_NVCC)$(NVCC) -std=c++17 $(NVCC_GENCODE) -Werror all-warnings -x cu -c kernels/kmath.h -diag-suppress 177 -o $(BUILD)/cuda/kmath_h.o
	@echo "  kmath.h compiles as CUDA"
	@# linked into a program with the C library they call (common/): every symbol must resolve
	$(Q)printf 'int main(void) { return 0; }\n' > $(BUILD)/cuda/check_main.c
	$(QUIET_NVCC)$(NVCC) $(NVCC_GENCODE) -o $(BUILD)/cuda/check_link $(BUILD)/cuda/check_main.c $(CU_OBJS) $(BUILD)/cuda/kmath_h.o $(LIBCOMMON) -lcublasLt -lcublas -lcudart $(if $(filter 1,$(NCCL)),-lnccl) -lstdc++ -lpthread -lm
	@echo "check-cuda: $(words $(CU_SRCS)) .cu files compiled and linked (no GPU needed)"
else
	@echo "check-cuda: nvcc not found; only the C11 half ran" && false
endif

# Debian packages needed to build, test and benchmark; installs only what is missing
DEPS_BUILD := build-essential pkg-config git libdnnl-dev libopenblas-openmp-dev libjansson-dev libyaml-dev libxxhash-dev zlib1g-dev \
  libopenmpi-dev openmpi-bin libpmix-dev libmicrohttpd-dev libcurl4-openssl-dev \
  libsqlite3-dev libcairo2-dev libfontconfig-dev patchelf
# catatonit: podman's --init (terarec train --container-image runs each program under it)
DEPS_TEST := python3 python3-numpy slurmctld slurmd slurm-client munge iproute2 curl clang chromium libjs-dygraphs \
  podman catatonit buildah debootstrap squashfs-tools
DEPS_BENCH := python3-torch python3-numpy
deps:
	$(Q)tools/deps.sh $(DEPS_BUILD) $(DEPS_TEST)

deps-build:
	$(Q)tools/deps.sh $(DEPS_BUILD)

deps-bench:
	$(Q)tools/deps.sh $(DEPS_BENCH)

# libFuzzer targets (clang): the manifest parser and the HTTP request router, each run
# for FUZZ_SECONDS from the seeds in tests/fuzz/corpus_<name>/ (a copy: found inputs stay in build)
FUZZ_SECONDS ?= 60
FUZZ_CC ?= clang
FUZZ_FLAGS := -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -D_DEFAULT_SOURCE -I$(BUILD)/gen
FUZZ_LIB_SRCS := ckpt_store/manifest.c ckpt_store/store.c ckpt_store/store_run.c ckpt_store/store_gc.c ckpt_store/route.c $(COMMON_SRCS)
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_LIB_SRCS) $(wildcard ckpt_store/*.h common/*.h)
	@mkdir -p $(@D)
	$(QUIET_LINK)$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $< $(FUZZ_LIB_SRCS) -ljansson -lxxhash -lm -lpthread
# one target per fuzzer, so that make -jN fuzz runs N of them at once (each is one process)
FUZZ_RUNS := $(patsubst $(BUILD)/fuzz/%,fuzz-run-%,$(FUZZ_TARGETS))
.PHONY: $(FUZZ_RUNS)
fuzz: $(FUZZ_RUNS)
$(FUZZ_RUNS): fuzz-run-%: $(BUILD)/fuzz/%
	$(Q)set -e; n=$*; \
	  rm -rf $(BUILD)/fuzz/corpus_$$n && mkdir -p $(BUILD)/fuzz/corpus_$$n && cp tests/fuzz/corpus_$$n/* $(BUILD)/fuzz/corpus_$$n/ 2>/dev/null || true; \
	  echo "  FUZZ    $$n ($(FUZZ_SECONDS) s)"; \
	  $< -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -artifact_prefix=$(BUILD)/fuzz/$$n- $(BUILD)/fuzz/corpus_$$n > $(BUILD)/fuzz/$$n.log 2>&1 || \
	    { echo "  FUZZ    $$n failed:"; grep -E '^(==[0-9]+==ERROR|SUMMARY|artifact_prefix|Test unit written)' $(BUILD)/fuzz/$$n.log; exit 1; }; \
	  grep -E '^(stat::number_of_executed_units|stat::peak_rss|INFO: Loaded)' $(BUILD)/fuzz/$$n.log | sed "s/^/  $$n: /"; \
	  grep -E '^#[0-9]+[[:space:]]+DONE' $(BUILD)/fuzz/$$n.log | tail -1 | sed "s/^/  $$n: /"

clean:
	rm -rf $(BUILD) build-asan build-ubsan build-tsan

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
