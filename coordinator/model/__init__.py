"""The pure protocol model: Kafka's classic group protocol as requests in, effects out (no I/O, no threads)."""
