"""The layout of a v2 record, for every walk over a batch's records section (the decoder in
``records.record``, the produce-time scans in ``records.scan``, the cleaner's filter, the Spark
reader's columnar decoder, the control-record reader of the producer state):

    length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value | headerCount varint |
    [headerKeyLength varint | headerKey utf-8 | headerValueLength varint | headerValue]...

Varints are zigzag (:mod:`tieredlog.formats.varint`); a length of -1 means null. A control batch
holds one record whose key is ``version i16 | type i16`` and, for a transaction marker, whose value is
``version i16 | coordinatorEpoch i32``. ``length`` counts the
bytes after itself. The records section follows the 61-byte batch header, compressed as a whole when
the batch is.
"""

from __future__ import annotations

import struct

from tieredlog.formats.varint import BytesLike, skip_varint

ATTRIBUTES_SIZE = 1  # always 0 in v2; Kafka ignores it
# attributes(1) timestampDelta(1) offsetDelta(1) keyLength(1) valueLength(1) headerCount(1), the
# least a record body holds, and one more byte for its length varint.
MIN_RECORD_BODY = 6
MIN_RECORD_SIZE = MIN_RECORD_BODY + 1
# The key and value of a control batch's one record (Kafka's ControlRecordType key and
# EndTransactionMarker value).
CONTROL_KEY = struct.Struct(">hh")  # version, type
CONTROL_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch


def key_length_position(buf: BytesLike, body: int) -> int:
    """Where the key-length varint of the record whose body (after its length varint) starts at
    ``body`` is: past the attributes and the timestamp and offset deltas, which are skipped unread.
    IndexError when the buffer ends first."""
    return skip_varint(buf, skip_varint(buf, body + ATTRIBUTES_SIZE))
