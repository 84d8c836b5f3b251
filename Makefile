# strata — the two commands a user needs:
#   make run    install what is missing, build, start a single-node cluster
#   make test   install what is missing, build (ASan+UBSan), run the suite
# and for developers:
#   make lint     every C file formatted as .clang-format says
#   make release  the gcc build (-O2, -Werror): CI builds it beside clang's
#   make fuzz     every libFuzzer target for FUZZ_SECONDS each (default 300)
#
# Build trees: build/ (sanitized, for tests) and build-release/ (for run and
# benchmarks).
JOBS ?= $(shell nproc)
BUILD ?= build
RELEASE ?= build-release
STRATA_HOME ?= $(CURDIR)/.strata
CTEST_ARGS ?=
FUZZ_SECONDS ?= 300

.PHONY: all deps build release test run stop soak bench fuzz lint clean

all: build

deps:
	@./scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=ON -DSTRATA_FUZZ=ON \
		-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

release: deps
	@cmake -S . -B $(RELEASE) -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ >/dev/null
	@cmake --build $(RELEASE) -j$(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 600 -LE soak $(CTEST_ARGS)

soak: build
	cd $(BUILD) && ctest --output-on-failure --timeout 3600 -L soak $(CTEST_ARGS)

# The fuzz targets also run for 15 s each inside `make test` (label fuzz).
fuzz: build
	cd $(BUILD) && STRATA_FUZZ_SECONDS=$(FUZZ_SECONDS) ctest --output-on-failure \
		--timeout $$(( $(FUZZ_SECONDS) + 120 )) -L fuzz $(CTEST_ARGS)

lint:
	@./scripts/check-format.sh

run: release
	./scripts/run.sh $(RELEASE) $(STRATA_HOME)

stop:
	-$(RELEASE)/bin/strata down --home $(STRATA_HOME)

bench: release
	./bench/run-all.sh $(RELEASE)

clean:
	rm -rf $(BUILD) $(RELEASE)
