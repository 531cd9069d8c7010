# Rumor: one Makefile (STYLE §4.11). `make help` lists the targets.
#
# Sources are found by wildcard: every .c under a module directory goes into
# build/lib/librumor.a; a module's X.cu is built with nvcc in CUDA builds and
# its X_stub.c in CPU-only builds, so each symbol exists exactly once.
# cli/*.c (the subcommands) and bench/*.c make the `rumor` binary; they are
# not in the library (as curl keeps src/ apart from lib/).

CC        ?= cc
AR        ?= ar
CUDA_HOME ?= /usr/local/cuda
USE_CUDA  ?= auto
BUILD     ?= build
SAN       ?=
OPT       ?= -O2
V         ?= 0

MODULES := core compress lowrank topology net gossip train node
# The config rule below comes first in the file; a bare `make` still builds.
.DEFAULT_GOAL := all
VERSION := 0.1.0
SONAME  := librumor.so.0

# --- CUDA detection (R11.1, R11.2: command -v, never $(which) in a define) --
NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard $(CUDA_HOME)/bin/nvcc))
ifeq ($(USE_CUDA),no)
  HAVE_CUDA := 0
  CUDA_WHY  := disabled (USE_CUDA=no)
else ifneq ($(NVCC),)
  HAVE_CUDA := 1
else ifeq ($(USE_CUDA),yes)
  $(error USE_CUDA=yes but nvcc was not found (set NVCC= or CUDA_HOME=))
else
  HAVE_CUDA := 0
  CUDA_WHY  := no nvcc found
endif
ifneq ($(filter-out auto yes no,$(USE_CUDA)),)
  $(error USE_CUDA must be auto, yes or no (got '$(USE_CUDA)'))
endif

# --- packages: installed, then asked, before anything is built --------------
# $(BUILD)/config.mk holds what pkg-config says of PKGS. Make remakes an
# included makefile before any goal and then reads it again, so the deps step
# (scripts/deps.sh) has installed the packages before pkg-config is asked, as
# the very first command on a fresh machine and under -j alike. The rule runs
# every time (quick when nothing is missing) but rewrites the file only when
# its text changes, so make restarts only then. A missing package fails here,
# by name: nothing links against a guessed library list.
PKGS := libzmq libsodium openblas lapacke libzstd inih libcjson zlib
CONFIG_MK := $(BUILD)/config.mk
NO_DEPS_GOALS := help clean deps
# A caller that gives PKG_LIBS on the command line (bench/gpu/run.sh, on a
# GPU machine with the packages unpacked beside pkg-config's view) skips it.
ifneq ($(filter-out $(NO_DEPS_GOALS),$(or $(MAKECMDGOALS),all)),)
  ifneq ($(origin PKG_LIBS),command line)
    include $(CONFIG_MK)
  endif
endif

# DEPS=no skips the install step where the caller provides the packages
# (docker/Dockerfile's build stage).
DEPS ?= yes
$(CONFIG_MK): FORCE
	@$(if $(filter no,$(DEPS)),,sh scripts/deps.sh)
	@mkdir -p $(dir $@)
	@sh scripts/config-mk.sh "$(PKGS)" cmocka > $@.new
	@if cmp -s $@.new $@; then rm -f $@.new; else mv $@.new $@; fi

# --- flags ---------------------------------------------------------------

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Werror
ALL_CFLAGS := -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE $(OPT) -g \
              -DRUMOR_VERSION_TEXT='"$(VERSION)"' \
              $(WARN) -fPIC -fvisibility=hidden -Iinclude -I. $(PKG_CFLAGS) \
              $(if $(SAN),-fsanitize=$(SAN) -fno-sanitize-recover=all -fno-omit-frame-pointer) \
              $(CFLAGS)
ALL_LDFLAGS := $(if $(SAN),-fsanitize=$(SAN)) $(LDFLAGS)
LDLIBS := $(PKG_LIBS) -lpthread -lm

NVCCFLAGS ?= -O2 -std=c++17 -arch=sm_90
ALL_NVCCFLAGS := $(NVCCFLAGS) -Iinclude -I. -Xcompiler -fPIC,-fvisibility=hidden

# --- sources ---------------------------------------------------------------
CU_SRC   := $(foreach m,$(MODULES),$(wildcard $(m)/*.cu))
STUB_SRC := $(patsubst %.cu,%_stub.c,$(CU_SRC))
LIB_C    := $(foreach m,$(MODULES),$(wildcard $(m)/*.c))
ifeq ($(HAVE_CUDA),1)
  LIB_C   := $(filter-out $(STUB_SRC),$(LIB_C))
  LIB_CU  := $(CU_SRC)
  CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcusolver -lcublas -lcudart -lstdc++
  LDLIBS  += $(CUDA_LDLIBS)
  CUDA_LINE := yes ($(NVCC))
else
  LIB_CU  :=
  CUDA_LINE := no, $(CUDA_WHY)
endif
BIN_C := $(wildcard cli/*.c bench/*.c)

LIB_OBJ := $(LIB_C:%.c=$(BUILD)/%.o) $(LIB_CU:%.cu=$(BUILD)/%.cu.o)
BIN_OBJ := $(BIN_C:%.c=$(BUILD)/%.o)
LIB     := $(BUILD)/lib/librumor.a
SHLIB   := $(BUILD)/lib/librumor.so
RUMOR   := $(BUILD)/bin/rumor

UNIT_SRC  := $(wildcard tests/unit/test_*.c)
INTEG_SRC := $(wildcard tests/integration/test_*.c)
FUZZ_SRC  := $(wildcard tests/fuzz/fuzz_*.c)
TEST_BINS := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/unit/%) \
             $(INTEG_SRC:tests/integration/%.c=$(BUILD)/tests/integration/%)
REPLAY_BINS := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/tests/fuzz/%)
# The insider of the trust tests (tests/tools/attack.h): every frame its
# node sends passes through the tool's hook.
ATTACK_SRC := $(wildcard tests/tools/*.c)
ATTACK     := $(BUILD)/tests/tools/rumor-attack

ifeq ($(V),1)
  Q :=
else
  Q := @
endif

.PHONY: all demo test check asan fuzz bench bench-wan lint format format-check \
        headers-check deps deploy-test cluster-test install uninstall clean help FORCE

all: $(RUMOR) $(SHLIB)
	@echo "[build] CUDA backend: $(CUDA_LINE)"

help:
	@echo "make demo          install missing packages, build, run the demo"
	@echo "make test          install missing packages, build, run every test"
	@echo "make asan          the whole test suite under ASan + UBSan"
	@echo "make fuzz          build the libFuzzer harnesses with clang"
	@echo "make deploy-test   docker/README.md end to end: image, 4 containers, a crash (root: own engine)"
	@echo "make cluster-test  docker/README.md's Slurm job and launch --hosts on real slurmd, sshd (root)"
	@echo "make bench         run the benchmarks (docs/benchmarks.md); QUICK=1 short"
	@echo "make bench-wan     the slow-link (WAN) matrix of issue 32 (about 1 hour)"
	@echo "make install       rumor, librumor.so/.a, headers, rumor.pc (PREFIX, DESTDIR)"
	@echo "make lint          banned functions, include direction, headers alone"
	@echo "make format-check  clang-format check of every source file"
	@echo "options: USE_CUDA=auto|yes|no  BUILD=dir  SAN=address,undefined  V=1"

# --- flag stamp (R11.4): rebuild everything when flags change -----------------
TRACK := $(CC):$(ALL_CFLAGS):$(ALL_LDFLAGS):$(HAVE_CUDA):$(NVCC):$(ALL_NVCCFLAGS)
$(BUILD)/.flags: FORCE
	@mkdir -p $(BUILD)
	@if [ x'$(TRACK)' != x"`cat $@ 2>/dev/null`" ]; then echo '$(TRACK)' > $@; fi

$(BUILD)/%.o: %.c $(BUILD)/.flags
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

# The backends' element loops (gossip/ref.c: the host's operations and
# the twins of the CUDA kernels) vectorized: -O2 alone leaves them scalar
# (ref.c also clones them for AVX2). Each element's arithmetic is
# unchanged: no floating-point sum is reordered without -ffast-math, and
# -std=c11 fuses no product.
$(BUILD)/gossip/ref.o: ALL_CFLAGS += -ftree-vectorize -fvect-cost-model=dynamic
$(BUILD)/gossip/ref.o: Makefile

$(BUILD)/%.cu.o: %.cu $(BUILD)/.flags
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(ALL_NVCCFLAGS) -c $< -o $@

# R11.5: recreate, never update, the archive.
$(LIB): $(LIB_OBJ) $(BUILD)/.flags
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(AR) rcs $@ $(LIB_OBJ)

# The same objects as a shared library, for python/rumor (ctypes): only
# RUMOR_API symbols are exported (-fvisibility=hidden; `nm -D` shows them).
$(SHLIB): $(LIB_OBJ) $(BUILD)/.flags
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  SHLIB   $@")
	$(Q)$(CC) -shared $(ALL_LDFLAGS) -Wl,-soname,$(SONAME) $(LIB_OBJ) $(LDLIBS) -o $@
	@ln -sf librumor.so $(dir $@)$(SONAME)

$(RUMOR): $(BIN_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) $(BIN_OBJ) $(LIB) $(LDLIBS) -o $@

# --- tests -------------------------------------------------------------------
$(BUILD)/tests/unit/%: tests/unit/%.c $(LIB) $(BUILD)/.flags
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  TEST    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -MMD -MP $(ALL_LDFLAGS) $< $(LIB) $(CMOCKA_LIBS) $(LDLIBS) -o $@

$(BUILD)/tests/integration/%: tests/integration/%.c $(LIB) $(BUILD)/.flags
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  TEST    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -MMD -MP $(ALL_LDFLAGS) $< $(LIB) $(CMOCKA_LIBS) $(LDLIBS) -o $@

$(ATTACK): $(ATTACK_SRC) tests/tools/attack.h $(LIB) $(BUILD)/.flags
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  TOOL    $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -Wl,--wrap=rumor_net_send $(ATTACK_SRC) $(LIB) $(LDLIBS) -o $@

# R12.2: with gcc each harness links a replay driver that runs its corpus.
$(BUILD)/tests/fuzz/%: tests/fuzz/%.c tests/fuzz/replay_main.c $(LIB) $(BUILD)/.flags
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  REPLAY  $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) $< tests/fuzz/replay_main.c $(LIB) $(LDLIBS) -o $@

deps:
	@sh scripts/deps.sh

# docker/README.md end to end in real containers, with a Docker engine: the
# reachable one, or (as root) a private dockerd for the test's time.
deploy-test: $(RUMOR)
	$(Q)RUMOR_BIN=$(RUMOR) sh scripts/with-docker.sh sh tests/integration/docker_e2e.sh

# docker/README.md's Slurm job (sbatch --wait) and `rumor launch --hosts`
# through real daemons: as root, a private one-host Slurm cluster
# (scripts/with-slurm.sh) and a private sshd on 127.0.0.1
# (scripts/with-sshd.sh), each around its own tests of test_deploy. A part
# whose daemons cannot be had is SKIPPED, saying why (exit 3 and the
# script's "[KIND] no ..." line); one that runs no test fails.
CLUSTER_PARTS := slurm:test_slurm_real__ sshd:test_launch_hosts_real__
cluster-test: $(RUMOR) $(BUILD)/tests/integration/test_deploy
	$(Q)status=0; for part in $(CLUSTER_PARTS); do \
	  kind=$${part%%:*}; log=$(BUILD)/cluster-test-$$kind.log; rc=0; \
	  RUMOR_BIN=$(RUMOR) sh scripts/with-$$kind.sh \
	    $(BUILD)/tests/integration/test_deploy "$${part#*:}*" >$$log 2>&1 || rc=$$?; \
	  cat $$log; \
	  if [ $$rc -eq 3 ] && grep -q "^\[$$kind\] no " $$log; then \
	    echo "cluster-test: $$kind SKIPPED (reason above)"; \
	  elif [ $$rc -ne 0 ] || ! grep -q '^\[  PASSED  \] [1-9]' $$log; then \
	    echo "cluster-test: $$kind FAILED"; status=1; \
	  fi; \
	done; exit $$status

# --- install (PREFIX, DESTDIR) ------------------------------------------------
# The binary, both libraries (librumor.so.VERSION with its soname link), the
# public headers and rumor.pc. Into the live tree (no DESTDIR, as root) it
# also refreshes the loader's cache, so dlopen("librumor.so.0") finds it
# under /usr/local/lib. `make check` installs into $(BUILD)/stage and its
# tests build a program against that tree with pkg-config.
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
STAGE      := $(BUILD)/stage
# a long module header's parts: include/rumor/MODULE/*.h (scripts/lint.sh)
PUBLIC_HEADERS   := $(wildcard include/rumor/*.h include/rumor/*/*.h)
PUBLIC_PART_DIRS := $(notdir $(patsubst %/,%,$(sort $(dir $(wildcard include/rumor/*/*.h)))))

define install_tree
	install -d $(1)$(BINDIR) $(1)$(LIBDIR)/pkgconfig $(1)$(INCLUDEDIR)/rumor
	install -m 755 $(RUMOR) $(1)$(BINDIR)/rumor
	install -m 644 $(LIB) $(1)$(LIBDIR)/librumor.a
	install -m 755 $(SHLIB) $(1)$(LIBDIR)/librumor.so.$(VERSION)
	ln -sf librumor.so.$(VERSION) $(1)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(1)$(LIBDIR)/librumor.so
	install -m 644 include/rumor/*.h $(1)$(INCLUDEDIR)/rumor/
	for d in $(PUBLIC_PART_DIRS); do \
	  install -d $(1)$(INCLUDEDIR)/rumor/$$d && \
	  install -m 644 include/rumor/$$d/*.h $(1)$(INCLUDEDIR)/rumor/$$d/ || exit 1; \
	done
	sh scripts/rumor-pc.sh '$(VERSION)' '$(PREFIX)' '$(LIBDIR)' '$(INCLUDEDIR)' \
	  '$(LDLIBS)' > $(1)$(LIBDIR)/pkgconfig/rumor.pc
endef

install: $(RUMOR) $(SHLIB) $(LIB)
	$(call install_tree,$(DESTDIR))
	@if [ -z '$(DESTDIR)' ] && [ "$$(id -u)" -eq 0 ]; then ldconfig; fi
	@echo "installed under $(DESTDIR)$(PREFIX): pkg-config --cflags --libs rumor"

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/rumor $(DESTDIR)$(LIBDIR)/librumor.* \
	  $(DESTDIR)$(LIBDIR)/pkgconfig/rumor.pc
	rm -rf $(DESTDIR)$(INCLUDEDIR)/rumor

$(STAGE)/.installed: $(RUMOR) $(SHLIB) $(LIB) $(PUBLIC_HEADERS) scripts/rumor-pc.sh
	@rm -rf $(STAGE)
	@$(if $(Q),echo "  INSTALL $(STAGE)")
	$(Q)$(MAKE) --no-print-directory install DESTDIR=$(abspath $(STAGE)) >/dev/null
	@touch $@

# The README's test command: set-up, the default build (CUDA when nvcc is
# here), every test, then the CPU-only build's tests.
test:
	$(Q)$(MAKE) --no-print-directory check
	$(Q)$(MAKE) --no-print-directory BUILD=$(BUILD)/cpu USE_CUDA=no check

# python3 loads a sanitizer build's librumor.so after the runtimes.
SAN_PRELOAD := $(if $(findstring address,$(SAN)),$(shell $(CC) -print-file-name=libasan.so)) \
               $(if $(findstring undefined,$(SAN)),$(shell $(CC) -print-file-name=libubsan.so))

check: $(RUMOR) $(SHLIB) $(TEST_BINS) $(REPLAY_BINS) $(ATTACK) $(STAGE)/.installed
	@echo "[build] CUDA backend: $(CUDA_LINE)"
	$(Q)RUMOR_BIN=$(RUMOR) RUMOR_LIB=$(SHLIB) RUMOR_SAN='$(SAN)' RUMOR_ATTACK=$(ATTACK) \
	  RUMOR_STAGE=$(STAGE) RUMOR_PREFIX=$(PREFIX) RUMOR_LIBDIR=$(LIBDIR) \
	  RUMOR_PRELOAD='$(strip $(SAN_PRELOAD))' sh scripts/run-tests.sh $(BUILD) $(TEST_BINS) -- $(REPLAY_BINS)

# R11.6, R11.9: sanitizers in their own build directory.
ASAN_BUILD ?= build/asan
asan:
	$(Q)ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(MAKE) --no-print-directory BUILD=$(ASAN_BUILD) SAN=address,undefined OPT=-O1 check

# R12.2: decoders never need CUDA.
FUZZ_BUILD := build/fuzz
fuzz:
	$(Q)$(MAKE) --no-print-directory CC=clang USE_CUDA=no BUILD=$(FUZZ_BUILD) \
	  SAN=address,undefined,fuzzer-no-link $(FUZZ_BUILD)/lib/librumor.a
	$(Q)for src in $(FUZZ_SRC); do \
	  name=$$(basename $$src .c); \
	  echo "  FUZZ    $(FUZZ_BUILD)/bin/$$name"; mkdir -p $(FUZZ_BUILD)/bin; \
	  clang -std=c11 -D_DEFAULT_SOURCE -Iinclude -I. -g -O1 \
	    -fsanitize=address,undefined,fuzzer $$src $(FUZZ_BUILD)/lib/librumor.a \
	    $(LDLIBS) -o $(FUZZ_BUILD)/bin/$$name || exit 1; \
	done
	@echo "run e.g.: $(FUZZ_BUILD)/bin/fuzz_topology -max_total_time=60 tests/fuzz/corpus/topology"

# Every tier (kernel, transport, gossip, scaling, end-to-end over shaped links
# in network namespaces: needs root) into docs/benchmarks.md and .json;
# QUICK=1 for a short run (one repetition, smaller sizes, 100 Mbit/s only).
bench: $(RUMOR)
	$(Q)/usr/bin/python3 bench/run_bench.py --rumor $(RUMOR) $(if $(QUICK),--quick)

# Issue 32's slow-link matrix (about an hour on 2 cores): docs/bench-wan.json,
# docs/bench-wan-*.png and the "Slow links (WAN)" section of docs/benchmarks.md.
# `make bench` runs only its smoke run (bench/wan/wan.py --quick).
bench-wan: $(RUMOR)
	$(Q)/usr/bin/python3 bench/wan/wan.py --rumor $(RUMOR) --rounds 3 --doc

demo: $(RUMOR)
	$(Q)RUMOR_BIN=$(RUMOR) sh scripts/demo.sh

lint:
	$(Q)sh scripts/lint.sh "$(CC)" "$(ALL_CFLAGS)"

headers-check:
	$(Q)sh scripts/lint.sh "$(CC)" "$(ALL_CFLAGS)" headers

FORMAT_SRC = $(shell git ls-files '*.c' '*.h' '*.cu' 2>/dev/null)
format-check:
	$(Q)clang-format --dry-run --Werror $(FORMAT_SRC) && echo "format-check: ok"

format:
	$(Q)clang-format -i $(FORMAT_SRC)

clean:
	rm -rf build

FORCE:

-include $(LIB_OBJ:.o=.d) $(BIN_OBJ:.o=.d) $(TEST_BINS:=.d)
