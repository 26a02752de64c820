"""Talking to other Kafka brokers: the broker's own inter-broker senders and the tools.

``connection`` is one node (connect, TLS, ApiVersions, SASL, correlation, timeouts), ``blocking`` its
thin synchronous form for the tools; ``node_clients`` keeps a connection per node; ``routing`` finds the
node a request goes to. ``protocol/`` below it is I/O-free: framing, the codec, the request guard.
"""
