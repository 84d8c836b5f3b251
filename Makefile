# strata — the two commands a user needs:
#   make run    install what is missing, build, start a single-node cluster
#   make test   install what is missing, build (ASan+UBSan), run the suite
#
# Build trees: build/ (sanitized, for tests) and build-release/ (for run and
# benchmarks).
JOBS ?= $(shell nproc)
BUILD ?= build
RELEASE ?= build-release
STRATA_HOME ?= $(CURDIR)/.strata
CTEST_ARGS ?=

.PHONY: all deps build release test run stop soak bench fuzz clean

all: build

deps:
	@./scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=ON -DSTRATA_FUZZ=ON \
		-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

release: deps
	@cmake -S . -B $(RELEASE) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(RELEASE) -j$(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 600 -LE soak $(CTEST_ARGS)

soak: build
	cd $(BUILD) && ctest --output-on-failure --timeout 3600 -L soak $(CTEST_ARGS)

run: release
	./scripts/run.sh $(RELEASE) $(STRATA_HOME)

stop:
	-$(RELEASE)/bin/strata down --home $(STRATA_HOME)

bench: release
	./bench/run-all.sh $(RELEASE)

clean:
	rm -rf $(BUILD) $(RELEASE)
