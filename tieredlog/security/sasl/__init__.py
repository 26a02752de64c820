"""SASL authentication of connections, as Kafka's SaslServerAuthenticator does it (KIP-43, KIP-152,
KIP-368): the PLAIN and SCRAM-SHA-256/512 mechanisms, the per-connection state machine, the listener
settings, and the client side the broker and the tools use to authenticate themselves."""
