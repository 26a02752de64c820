"""An estimated monthly object-store bill per topic: the bytes stored now at the storage price, plus the
requests counted since this broker started, extrapolated to a 30-day month (over at least an hour).
Pure arithmetic."""

from __future__ import annotations

from dataclasses import dataclass

from tieredlog.config import BrokerConfig
from tieredlog.console.model import Prices, TopicUsage

MONTH_MS = 30 * 24 * 3600 * 1000
GB = 1_000_000_000  # object stores bill decimal gigabytes
MIN_WINDOW_MS = 3600 * 1000


@dataclass(frozen=True, slots=True)
class MonthlyCost:
    storage: float
    requests: float

    @property
    def total(self) -> float:
        return self.storage + self.requests


def monthly_cost(prices: Prices, stored_bytes: int, usage: TopicUsage, elapsed_ms: int) -> MonthlyCost:
    """``stored_bytes``: the topic's remote bytes now; ``usage``: its requests over ``elapsed_ms``.
    PUT, COPY, POST and LIST share one price, GET (and the rest) the other; DELETE is free (S3)."""
    storage = stored_bytes / GB * prices.storage_gb_month
    # less than an hour of counts is taken as an hour: a burst at start-up is not a month's traffic
    per_month = MONTH_MS / max(elapsed_ms, MIN_WINDOW_MS)
    requests = ((usage.puts + usage.lists) * prices.put_per_1000 + usage.gets * prices.get_per_1000) / 1000
    return MonthlyCost(storage, requests * per_month)


def prices_of(config: BrokerConfig) -> Prices:
    """The remote.log.cost.* broker configs."""
    return Prices(float(config["remote.log.cost.storage.per.gb.month"]),
                  float(config["remote.log.cost.put.per.1000.requests"]),
                  float(config["remote.log.cost.get.per.1000.requests"]))
