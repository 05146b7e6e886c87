"""The coordinator: Kafka's classic group protocol over gRPC, in floors (``lint-imports`` keeps them).

Top down, each floor importing only from below:

- ``testing``: a harness that drives the model on a fake clock (for tests and users' own tests);
- ``process``: ``groupcoord serve`` (options, start-up, shutdown, tuning, snapshot pick-up);
- ``rpc``: the gRPC servicers and server, and requests parsed before anything looks at them;
- ``auth`` | ``ha``: TLS, principals and ACLs | election, fenced ZooKeeper store, the elected office;
- ``runtime``: carries out what the model decides (answers, timers, writes, checker threads, lag, metrics);
- ``storage``: the store interface, in memory and SQLite;
- ``model``: the pure protocol model, requests in and effects out (no gRPC, ZooKeeper or SQLite);
- ``config`` and ``clock``: settings and time, which every floor takes.
"""
