"""A LocalTieredStorage whose uploads can be stopped half-way, for the tests that kill a leader mid-copy.

Loaded through ``remote.log.storage.manager.class.name=interrupted_rsm:InterruptedCopyStorage`` and
``remote.log.storage.manager.class.path=<this folder>``. While the file ``hang-copy`` exists in
``rsm.config.control.dir``, ``copy_log_segment_data`` writes the segment's ``.log`` object (the first
object of the copy, as Kafka's order has it) and then blocks before the indexes and the manifest: the
remote tier holds a partial upload, the metadata a COPY_SEGMENT_STARTED, and nothing a reader would
take as committed. It creates ``hung-copy-<start offset>`` when it starts to block, so a test waits
for that instead of sleeping.
"""

from __future__ import annotations

import time
from pathlib import Path

from tieredlog.atomic_file import atomic_copy
from tieredlog.rsm.local import LOG_SUFFIX, LocalTieredStorage


class InterruptedCopyStorage(LocalTieredStorage):
    def configure(self, configs):
        super().configure(configs)
        self._control = Path(str(configs["control.dir"]))

    def copy_log_segment_data(self, md, data):
        if (self._control / "hang-copy").exists():
            dest = self.segment_path(md, LOG_SUFFIX)
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(data.log_segment, "rb") as src:
                atomic_copy(dest, src, sync_dir=True, unique_tmp=True)
            (self._control / f"hung-copy-{md.start_offset}").touch()
            while (self._control / "hang-copy").exists():
                time.sleep(0.05)
        return super().copy_log_segment_data(md, data)
