# Rumor: one Makefile (STYLE §4.11). `make help` lists the targets.
#
# Sources are found by wildcard: every .c under a module directory goes into
# build/lib/librumor.a; a module's X.cu is built with nvcc in CUDA builds and
# its X_stub.c in CPU-only builds, so each symbol exists exactly once.
# node/main.c and bench/*.c make the `rumor` binary.

CC        ?= cc
AR        ?= ar
CUDA_HOME ?= /usr/local/cuda
USE_CUDA  ?= auto
BUILD     ?= build
SAN       ?=
OPT       ?= -O2
V         ?= 0

MODULES := core compress lowrank topology net gossip node

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

# --- flags ---------------------------------------------------------------
PKGS := libzmq libsodium openblas lapacke libzstd inih libcjson
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(or $(shell pkg-config --libs $(PKGS) 2>/dev/null),-lzmq -lsodium -lopenblas -llapacke)
CMOCKA_LIBS := $(or $(shell pkg-config --libs cmocka 2>/dev/null),-lcmocka)

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Werror
ALL_CFLAGS := -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE $(OPT) -g \
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
MAIN_SRC := node/main.c
LIB_C    := $(filter-out $(MAIN_SRC),$(foreach m,$(MODULES),$(wildcard $(m)/*.c)))
ifeq ($(HAVE_CUDA),1)
  LIB_C   := $(filter-out $(STUB_SRC),$(LIB_C))
  LIB_CU  := $(CU_SRC)
  LDLIBS  += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcusolver -lcublas -lcudart -lstdc++
  CUDA_LINE := yes ($(NVCC))
else
  LIB_CU  :=
  CUDA_LINE := no, $(CUDA_WHY)
endif
BIN_C := $(MAIN_SRC) $(wildcard bench/*.c)

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

ifeq ($(V),1)
  Q :=
else
  Q := @
endif

.PHONY: all demo test check test-cpu asan fuzz bench lint format format-check \
        headers-check deps clean help FORCE

all: $(RUMOR) $(SHLIB)
	@echo "[build] CUDA backend: $(CUDA_LINE)"

help:
	@echo "make demo          install missing packages, build, run the demo"
	@echo "make test          install missing packages, build, run every test"
	@echo "make asan          the whole test suite under ASan + UBSan"
	@echo "make fuzz          build the libFuzzer harnesses with clang"
	@echo "make bench         run the benchmarks (docs/benchmarks.md); QUICK=1 short"
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
	$(Q)$(CC) -shared $(ALL_LDFLAGS) -Wl,-soname,librumor.so $(LIB_OBJ) $(LDLIBS) -o $@

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

# R12.2: with gcc each harness links a replay driver that runs its corpus.
$(BUILD)/tests/fuzz/%: tests/fuzz/%.c tests/fuzz/replay_main.c $(LIB) $(BUILD)/.flags
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  REPLAY  $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) $< tests/fuzz/replay_main.c $(LIB) $(LDLIBS) -o $@

deps:
	@sh scripts/deps.sh

# The README's test command: set-up, the default build (CUDA when nvcc is
# here), every test, then the CPU-only build's tests.
test: deps
	$(Q)$(MAKE) --no-print-directory check
	$(Q)$(MAKE) --no-print-directory BUILD=$(BUILD)/cpu USE_CUDA=no check

# python3 loads a sanitizer build's librumor.so after the runtimes.
SAN_PRELOAD := $(if $(findstring address,$(SAN)),$(shell $(CC) -print-file-name=libasan.so)) \
               $(if $(findstring undefined,$(SAN)),$(shell $(CC) -print-file-name=libubsan.so))

check: $(RUMOR) $(SHLIB) $(TEST_BINS) $(REPLAY_BINS)
	@echo "[build] CUDA backend: $(CUDA_LINE)"
	$(Q)RUMOR_BIN=$(RUMOR) RUMOR_LIB=$(SHLIB) RUMOR_SAN='$(SAN)' \
	  RUMOR_PRELOAD='$(strip $(SAN_PRELOAD))' sh scripts/run-tests.sh $(BUILD) $(TEST_BINS) -- $(REPLAY_BINS)

# R11.6, R11.9: sanitizers in their own build directory.
ASAN_BUILD ?= build/asan
asan: deps
	$(Q)ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(MAKE) --no-print-directory BUILD=$(ASAN_BUILD) SAN=address,undefined OPT=-O1 check

# R12.2: decoders never need CUDA.
FUZZ_BUILD := build/fuzz
fuzz: deps
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
bench: deps $(RUMOR)
	$(Q)/usr/bin/python3 bench/run_bench.py --rumor $(RUMOR) $(if $(QUICK),--quick)

demo: deps $(RUMOR)
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
