# One command each: `make demo`, `make test`, `make lint`, `make bench`. Each creates .venv if needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv demo test test-fast lint bench chaos proto clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,dev,bench,stats]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/groupcoord demo

# The suite waits on timers and child processes more than it computes: TEST_WORKERS pytest-xdist processes
# (each test isolated: free ports, its own tmp_path, one Spark session per worker process).
TEST_WORKERS ?= 4
test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal

test-fast: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m "not slow"

# ruff, mypy and the import contracts (config in pyproject.toml); runs all three, fails if any fails.
lint: $(STAMP)
	@status=0; \
	echo "==> ruff check ."; $(VENV)/bin/ruff check . || status=1; \
	echo "==> mypy"; $(VENV)/bin/mypy || status=1; \
	echo "==> lint-imports"; $(VENV)/bin/lint-imports || status=1; \
	exit $$status

bench: $(STAMP)
	$(PY) benchmarks/run_all.py $(BENCH_ARGS)

# The fault suite at full size (tests/chaos/README.md): 1,000 seeded faults over real coordinator, ZooKeeper and
# worker processes, the wire fuzzer's large profile, a 10-minute soak. About 45 minutes; CI runs the small versions.
CHAOS_SEED ?= 17
chaos: $(STAMP)
	@status=0; \
	$(PY) -m tests.chaos.run --faults 1000 --seed $(CHAOS_SEED) || status=1; \
	HYPOTHESIS_PROFILE=chaos $(PY) -m pytest -q -s tests/coordinator/rpc/test_fuzz_wire.py || status=1; \
	$(PY) -m tests.chaos.soak --minutes 10 || status=1; \
	exit $$status

# Regenerate the gRPC/protobuf stubs from proto/ (tests fail when they are stale).
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -Iproto --python_out=. --pyi_out=. --grpc_python_out=. proto/groupcoord/v1/groupcoord.proto

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
