"""`tieredlog remote segments | dump-metadata` over a log dir written by the topic-based RLMM."""

from __future__ import annotations

from rlmm_harness import (  # the in-test LogManager slice and helpers
    TPS,
    build,
    log_manager_for,
    seg,
)

from tieredlog.cli import main as cli_main
from tieredlog.rlmm.topic import METADATA_TOPIC
from tieredlog.rsm.local import uuid_to_base64


def test_segments_lists_states_of_one_topic(tmp_path, capsys):
    m, logs, done, pending, gone, other = build(tmp_path)
    m.close()  # snapshots written
    # a segment written after the snapshot (the broker crashed): the tool replays the tail
    tail = seg(TPS[3], 0, 49)  # topic0, partition 3
    m2 = log_manager_for(logs, tmp_path)
    m2.add_remote_log_segment_metadata(tail)
    assert cli_main(["remote", "segments", "--topic", "topic0", "--log-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in out[1:]]
    assert [(r[0], r[1], r[2], r[3], r[6]) for r in rows] == [
        ("0", "0", "99", "COPY_SEGMENT_FINISHED", uuid_to_base64(done.remote_log_segment_id.id)),
        ("0", "100", "199", "COPY_SEGMENT_STARTED", uuid_to_base64(pending.remote_log_segment_id.id)),
        ("3", "0", "49", "COPY_SEGMENT_STARTED", uuid_to_base64(tail.remote_log_segment_id.id)),
    ]
    assert rows[0][4] == "1234"
    assert cli_main(["remote", "segments", "--topic", "topic0", "--partition", "3", "--log-dir", str(tmp_path)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert cli_main(["remote", "segments", "--topic", "nope", "--log-dir", str(tmp_path)]) == 1
    m2.close()


def test_dump_metadata_prints_every_record(tmp_path, capsys):
    m, logs, done, *_ = build(tmp_path)
    m.close()
    assert cli_main(["remote", "dump-metadata", "--log-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    total = sum(logs.get_log(t).log_end_offset for t in logs.logs if t.topic == METADATA_TOPIC)
    assert len(lines) == total == 7
    first = next(line for line in lines if uuid_to_base64(done.remote_log_segment_id.id) in line)
    assert first.startswith("partition: ") and ", offset: 0, value: RemoteLogSegmentMetadata{" in first
    assert "startOffset=0, endOffset=99" in first and "state=COPY_SEGMENT_STARTED" in first
    assert sum("state=DELETE_SEGMENT_FINISHED" in line for line in lines) == 1
    assert cli_main(["remote", "dump-metadata", "--log-dir", str(tmp_path / "empty")]) == 1

