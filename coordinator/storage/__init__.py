"""Where group records live between restarts: the store interface, in memory and SQLite."""
