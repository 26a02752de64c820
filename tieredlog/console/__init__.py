"""The broker's built-in console: read-only HTML pages on the metrics port that show where each
partition's data is (remote range, local range, high watermark, LSO, segments), how far tiering
lags, the cluster's health, consumer groups, and the object store's cost per topic.

``snapshot`` copies broker state (on the event loop), ``render`` and ``offset_line`` turn a copy into
HTML, ``app`` serves it beside ``/metrics``; tieredlog.server.broker_metrics wires it.
"""
