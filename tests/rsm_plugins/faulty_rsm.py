"""A LocalTieredStorage whose calls hang or fail on demand, for the broker-level fault tests.

Loaded by the broker through ``remote.log.storage.manager.class.name=faulty_rsm:FaultyStorage`` and
``remote.log.storage.manager.class.path=<this folder>``. The test drives it with flag files in
``rsm.config.control.dir``: ``hang`` blocks every call while the file exists, ``fail`` makes every
call raise RemoteStorageException.
"""

from __future__ import annotations

import time
from pathlib import Path

from tieredlog.rsm.api import RemoteStorageException
from tieredlog.rsm.local import LocalTieredStorage


class FaultyStorage(LocalTieredStorage):
    def configure(self, configs):
        super().configure(configs)
        self._control = Path(str(configs["control.dir"]))

    def _gate(self) -> None:
        while (self._control / "hang").exists():
            time.sleep(0.05)
        if (self._control / "fail").exists():
            raise RemoteStorageException("injected failure")

    def copy_log_segment_data(self, md, data):
        self._gate()
        return super().copy_log_segment_data(md, data)

    def fetch_log_segment(self, md, start_position, end_position=None):
        self._gate()
        return super().fetch_log_segment(md, start_position, end_position)

    def fetch_index(self, md, index_type):
        self._gate()
        return super().fetch_index(md, index_type)

    def delete_log_segment_data(self, md):
        self._gate()
        return super().delete_log_segment_data(md)
