# Thin wrapper over CMake so that set-up is two commands: `make demo` and
# `make test`. Everything real lives in CMakeLists.txt and scripts/.
JOBS        ?= $(shell nproc)
BUILD       ?= build
DEMO_MODEL  ?= models/demo.gguf
FUZZ_SECONDS ?= 600
ORACLE_DIR  ?= $(HOME)/.cache/moestream/oracle

.PHONY: all deps build build-release demo test test-asan test-clang fuzz fuzz-server fuzz-grammar fuzz-smoke oracle clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

$(DEMO_MODEL): | build
	@mkdir -p $(dir $@)
	$(BUILD)/moestream mkmodel --preset small --experts-type q4_k --dense-type q8_0 --seed 1 --force -o $@

demo: build $(DEMO_MODEL)
	$(BUILD)/moestream inspect $(DEMO_MODEL)
	$(BUILD)/moestream run -m $(DEMO_MODEL) -p "Once upon a time" -n 48 --seed 1

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The whole suite again under AddressSanitizer + UndefinedBehaviorSanitizer
# (optimised: -O2 keeps the differential test's model runs affordable; the
# sanitizers instrument every access all the same).
test-asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMS_SANITIZE=ON >/dev/null
	@cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS)

# Warnings-as-errors build and test run with clang (gcc is the default). The
# differential test against llama.cpp's vectors runs under gcc and ASan; here
# it would only repeat the same model runs.
test-clang: deps
	@CC=clang cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build build-clang -j $(JOBS)
	cd build-clang && ctest --output-on-failure -j $(JOBS) -E test_diff_llama

# The -O3 build (CMAKE_BUILD_TYPE=Release) with gcc and -Werror: its deeper
# inlining brings -Wmaybe-uninitialized warnings the default build does not
# see, so CI compiles it too.
build-release: deps
	@cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build build-release -j $(JOBS)
	@# the bench tools are not in `all`; building them here keeps them compiling
	@cmake --build build-release -j $(JOBS) --target bench_kernels bench_indexer bench_draft

build-fuzz/fuzz_gguf: deps
	@CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMS_FUZZ=ON >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target fuzz_gguf

# Long fuzzing run of the GGUF reader: make fuzz FUZZ_SECONDS=3600
fuzz: build-fuzz/fuzz_gguf
	scripts/fuzz.sh build-fuzz/fuzz_gguf $(FUZZ_SECONDS)

build-fuzz/fuzz_server: deps
	@CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMS_FUZZ=ON >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target fuzz_server

# libFuzzer on the server's request parsers and the DSML parser:
# make fuzz-server FUZZ_SECONDS=600
fuzz-server: build-fuzz/fuzz_server
	FUZZ_CORPUS=tests/fuzz/corpus_server scripts/fuzz.sh build-fuzz/fuzz_server $(FUZZ_SECONDS)

build-fuzz/fuzz_grammar: deps
	@CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMS_FUZZ=ON >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target fuzz_grammar

# libFuzzer on the GBNF parser and matcher and the JSON Schema converter:
# make fuzz-grammar FUZZ_SECONDS=600
fuzz-grammar: build-fuzz/fuzz_grammar
	FUZZ_CORPUS=tests/fuzz/corpus_grammar FUZZ_DICT=tests/fuzz/grammar.dict scripts/fuzz.sh build-fuzz/fuzz_grammar $(FUZZ_SECONDS)

# Bounded, repeatable runs used by CI (a fixed seed and input count; the
# time limit only caps a slow machine). Long runs with fresh seeds are the
# fuzz and fuzz-grammar targets above.
fuzz-smoke: build-fuzz/fuzz_gguf build-fuzz/fuzz_grammar
	FUZZ_SEED=1 FUZZ_RUNS=300000 scripts/fuzz.sh build-fuzz/fuzz_gguf 120
	FUZZ_SEED=1 FUZZ_RUNS=150000 FUZZ_CORPUS=tests/fuzz/corpus_grammar FUZZ_DICT=tests/fuzz/grammar.dict scripts/fuzz.sh build-fuzz/fuzz_grammar 120

# Live llama.cpp check (downloads node-llama-cpp, ~1 GB, into ORACLE_DIR).
oracle: build
	ORACLE_DIR=$(ORACLE_DIR) scripts/oracle.sh $(BUILD)/moestream

clean:
	rm -rf build build-asan build-clang build-fuzz
