"""tieredlog: a Kafka-protocol broker built around tiered storage."""

__version__ = "0.1.0"
