"""Every on-disk and in-bucket format as pure functions on bytes: no I/O, no broker imports.

The log, the RLM, the tools, the plugins and the Spark reader all read and write through these modules,
so each layout is defined once: ``index`` (offset and time index entries), ``txn_index`` (aborted
transactions), ``checkpoints`` (offset and leader-epoch checkpoints, ``partition.metadata``),
``producer_snapshot``, ``lineage`` (leader-epoch arithmetic), ``manifest`` (the remote segment's commit
marker) and ``record_walk`` (varints and the v2 record layout).
"""
