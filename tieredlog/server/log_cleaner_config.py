"""The broker's log.cleaner.* settings as the log layer's CleanerConfig."""

from __future__ import annotations

from tieredlog.config import BrokerConfig
from tieredlog.log.cleaner.log_cleaner import CleanerConfig


def cleaner_config_of(config: BrokerConfig) -> CleanerConfig:
    return CleanerConfig(
        enable=bool(config["log.cleaner.enable"]),
        num_threads=int(config["log.cleaner.threads"]),
        dedupe_buffer_size=int(config["log.cleaner.dedupe.buffer.size"]),
        io_buffer_size=int(config["log.cleaner.io.buffer.size"]),
        io_buffer_load_factor=float(config["log.cleaner.io.buffer.load.factor"]),
        max_io_bytes_per_second=float(config["log.cleaner.io.max.bytes.per.second"]),
        backoff_ms=int(config["log.cleaner.backoff.ms"]),
    )
