"""Benchmarks: each bench_*.py module has main() that prints figures and ratios.

They start brokers, ZooKeeper and S3 servers with the tests' harnesses (tests/harness/), imported by file
name as the tests import them (`from broker_harness import BrokerProcess`)."""

import sys
from pathlib import Path

_HARNESS = Path(__file__).resolve().parent.parent / "tests" / "harness"
if str(_HARNESS) not in sys.path:
    sys.path.insert(0, str(_HARNESS))
