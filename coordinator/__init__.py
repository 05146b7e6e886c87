"""The coordinator: Kafka's classic group protocol over gRPC.

Layers inside: ``model`` (pure group logic: requests in, effects out) with its handlers
(``join``, ``sync``, ``membership``, ``admin``, ``phases``) and state table (``states``);
``runtime`` (carries effects out: store, timers, answers, office); ``service``/``server``
(gRPC); ``serve`` (the ``groupcoord serve`` process); stores and HA at the edges.
"""
