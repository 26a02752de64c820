"""The RemoteLogManager (KIP-405): copy, expiration and follower tasks, the remote reader pool,
the remote index cache and quotas. See manager.py for the overview and factory.py for defaults."""

from tieredlog.rlm.factory import create_remote_log_manager
from tieredlog.rlm.manager import RemoteLogManager
from tieredlog.rlm.metrics import start_metrics_server

__all__ = ["RemoteLogManager", "create_remote_log_manager", "start_metrics_server"]
