"""The runtime: carries out what the model decides (answers, timers, writes, checker threads, lag, metrics)."""
