"""A remote log metadata manager plugin for the tests: the in-memory manager, recording what it was
configured with and each segment state it was told about.

Loaded through ``remote.log.metadata.manager.class.name=recording_rlmm:RecordingMetadataManager`` and
``remote.log.metadata.manager.class.path=<this folder>``. ``configure()`` writes its properties as JSON
to ``<rlmm.config.record.dir>/configure.json``; every segment add / update appends the state's name to
``<record.dir>/states``.
"""

from __future__ import annotations

import json
from pathlib import Path

from tieredlog.rlmm.memory import InMemoryRemoteLogMetadataManager


class RecordingMetadataManager(InMemoryRemoteLogMetadataManager):
    def configure(self, configs):
        self._dir = Path(str(configs["record.dir"]))
        (self._dir / "configure.json").write_text(json.dumps({k: str(v) for k, v in configs.items()}))

    def _record(self, state):
        with open(self._dir / "states", "a") as f:
            f.write(state.name + "\n")

    def add_remote_log_segment_metadata(self, remote_log_segment_metadata):
        super().add_remote_log_segment_metadata(remote_log_segment_metadata)
        self._record(remote_log_segment_metadata.state)

    def update_remote_log_segment_metadata(self, update):
        super().update_remote_log_segment_metadata(update)
        self._record(update.state)
