"""A LocalTieredStorage whose calls hang or fail on demand, for the broker-level fault tests.

Loaded by the broker through ``remote.log.storage.manager.class.name=faulty_rsm:FaultyStorage`` and
``remote.log.storage.manager.class.path=<this folder>``. The test drives it with flag files in
``rsm.config.control.dir``: ``hang`` blocks every call while the file exists, ``fail`` makes every
call raise RemoteStorageException.

So that tests wait for what happened instead of sleeping, the plugin leaves evidence in the same
folder: a call that starts to hang creates ``hung-<method>``, and every injected failure appends
``<method>`` as one line to ``failures``.
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

    def _gate(self, method: str) -> None:
        if (self._control / "hang").exists():
            (self._control / f"hung-{method}").touch()
            while (self._control / "hang").exists():
                time.sleep(0.05)
        if (self._control / "fail").exists():
            with open(self._control / "failures", "a") as f:
                f.write(method + "\n")
            raise RemoteStorageException("injected failure")

    def copy_log_segment_data(self, md, data):
        self._gate("copy_log_segment_data")
        return super().copy_log_segment_data(md, data)

    def fetch_log_segment(self, md, start_position, end_position=None):
        self._gate("fetch_log_segment")
        return super().fetch_log_segment(md, start_position, end_position)

    def fetch_index(self, md, index_type):
        self._gate("fetch_index")
        return super().fetch_index(md, index_type)

    def delete_log_segment_data(self, md):
        self._gate("delete_log_segment_data")
        return super().delete_log_segment_data(md)
