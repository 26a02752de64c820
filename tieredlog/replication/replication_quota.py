"""Replication throttles (KIP-73): Kafka's ``ReplicationQuotaManager``, one for the leader side and
one for the follower side of this broker.

A partition is throttled here when its topic's ``leader.replication.throttled.replicas`` (leader
side) or ``follower.replication.throttled.replicas`` (follower side) names ``partition:this broker``,
or is ``*``. Only replicas outside the ISR are held back (a follower that is in sync never is): the
leader answers a throttled follower's fetch with no records while the quota is exceeded, and the
follower leaves a throttled partition out of its fetch while its own quota is exceeded. Both record
the bytes of throttled partitions they move. The rate is ``leader.replication.throttled.rate`` /
``follower.replication.throttled.rate`` (dynamic broker configs), measured by the project's byte-rate
quota (``tieredlog.rlm.quota``: a token bucket holding ``replication.quota.window.size.seconds`` of
bytes, so the long-run rate is the bound and a burst is at most one window).

Runs on the event loop; the bucket's lock only guards arithmetic.
"""

from __future__ import annotations

import functools
import logging

from tieredlog.log.config import ALL_REPLICAS, LONG_MAX, ConfigError, LogConfig, parse_throttled_replicas
from tieredlog.log.types import TopicPartition
from tieredlog.rlm.quota import RLMQuotaManager

log = logging.getLogger(__name__)

LEADER = "LeaderReplication"
FOLLOWER = "FollowerReplication"


@functools.lru_cache(maxsize=256)
def _parsed(name: str, value: str) -> frozenset[tuple[int, int]] | str:
    try:
        return parse_throttled_replicas(name, value)
    except ConfigError as exc:
        # topic configs are validated when set; a value written to ZooKeeper by hand throttles nothing
        log.warning("%s", exc)
        return frozenset()


class ReplicationQuotaManager:
    def __init__(self, kind: str, broker_id: int, rate: int = LONG_MAX, window_size_seconds: float = 1.0) -> None:
        self.kind = kind  # LEADER or FOLLOWER
        self.broker_id = broker_id
        self._config_name = f"{'leader' if kind == LEADER else 'follower'}.replication.throttled.replicas"
        self._bucket = RLMQuotaManager(rate, window_size_seconds, name=kind)
        self.bytes_throttled_total = 0  # bytes of throttled partitions moved (recorded)
        self.throttled_fetches = 0  # times a throttled partition was held back

    @property
    def rate(self) -> int:
        return self._bucket.max_bytes_per_second

    def update_quota(self, rate: int) -> None:
        if rate != self.rate:
            log.info("%s throttle of broker %d is now %s", self.kind, self.broker_id,
                     "unlimited" if rate >= LONG_MAX else f"{rate} B/s")
        self._bucket.update_quota(rate)

    def is_throttled(self, tp: TopicPartition, config: LogConfig) -> bool:
        """The topic's configs ``config`` name this broker's replica of ``tp`` (or ``*``) for this side."""
        value = (config.leader_replication_throttled_replicas if self.kind == LEADER
                 else config.follower_replication_throttled_replicas)
        if not value:
            return False
        replicas = _parsed(self._config_name, value)
        return replicas == ALL_REPLICAS or (tp.partition, self.broker_id) in replicas

    def is_quota_exceeded(self) -> bool:
        return self._bucket.is_quota_exceeded()

    def should_throttle(self, tp: TopicPartition, config: LogConfig, in_sync: bool) -> bool:
        """Kafka's shouldLeaderThrottle / shouldFollowerThrottle: an out-of-sync, throttled replica
        while the quota is exceeded."""
        if in_sync or self._bucket.unlimited or not self.is_throttled(tp, config) or not self.is_quota_exceeded():
            return False
        self.throttled_fetches += 1
        return True

    def throttle_time_ms(self) -> float:
        return self._bucket.throttle_time_ms()

    def record(self, nbytes: int) -> None:
        if nbytes > 0:
            self.bytes_throttled_total += nbytes
            self._bucket.record(nbytes)

