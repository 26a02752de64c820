"""Log compaction: Kafka's LogCleaner (cleanup.policy=compact).

``offset_map`` (key digest -> latest offset), ``batch_filter`` (one batch, bytes in and out),
``txn_metadata`` (aborted transactions and markers), ``cleaner`` (one round on one log),
``manager`` (what to clean next, the checkpoints), ``log_cleaner`` (threads, throttle, metrics).
"""
