# quorumlog: the two commands a newcomer needs are `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST := $(BIN)/python -m pytest
WORKERS ?= 2

.PHONY: install system-deps test test-fast run bench soak clean

install: $(STAMP)

# The C sources too: an editable install compiles the optional C extensions in place, so a change rebuilds them.
$(STAMP): pyproject.toml setup.py quorumlog/format/_fastcodec.c quorumlog/format/_crc32c.h quorumlog/topic/_fastmessage.c \
		quorumlog/bookie/_fastbookie.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[spark,dev,doors]'
	touch $(STAMP)

# System packages the tests and benchmarks use; idempotent, installs only what is missing (needs root).
# Listed before install: the compiled codec is built by install when a C compiler is there.
system-deps:
	@bash scripts/system-deps.sh

# worksteal: a worker that runs out takes queued tests from the other, so the long ones do not end the run alone
test: system-deps install
	$(PYTEST) -n $(WORKERS) --dist worksteal --durations=15

test-fast: install
	$(PYTEST) -n $(WORKERS) -m "not slow and not e2e and not spark"

run: system-deps install
	$(BIN)/python -m quorumlog.demo

bench: system-deps install
	PY=$(BIN)/python scripts/peers-deps.sh
	$(BIN)/python bench/store.py
	$(BIN)/python bench/core.py
	$(BIN)/python bench/spark.py
	$(BIN)/python bench/peers.py
	$(BIN)/python bench/membership.py
	$(BIN)/python bench/groups.py
	$(BIN)/python bench/bookie.py
	$(BIN)/python bench/ledgers.py
	$(BIN)/python bench/doors.py
	$(BIN)/python bench/startup.py

# The long soaks (minutes each): the Raft group's every fault kind, a master/slave group's, and the ledgers'
# (figures in bench/results/).
soak: system-deps install
	$(BIN)/python -m quorumlog.soak --seed 1 --cycles 110 --out bench/results/soak-$$(date +%F).json
	$(BIN)/python -m quorumlog.soak --mode master-slave --seed 3 --cycles 110 \
		--out bench/results/soak-master-slave-$$(date +%F).json
	$(BIN)/python -m quorumlog.soak.ledgers --seed 2 --cycles 110 --out bench/results/soak-ledgers-$$(date +%F).json

clean:
	rm -rf $(VENV) out build *.egg-info
