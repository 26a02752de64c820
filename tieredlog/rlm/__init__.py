"""The RemoteLogManager (KIP-405): copy, expiration and follower tasks, the remote reader pool,
the remote index cache and quotas. See manager.py for the overview; the broker assembles it in
tieredlog.server.remote_tier."""

from tieredlog.rlm.manager import RemoteLogManager
from tieredlog.rlm.metrics import start_metrics_server

__all__ = ["RemoteLogManager", "start_metrics_server"]
