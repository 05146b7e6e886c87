"""groupcoord: keep groups of workers agreed on who runs which task.

Packages: ``coordinator`` (the server), ``worker`` (the embeddable client),
``assignors`` (who gets what), ``loadstats`` (the Spark load statistics job);
this package holds what they share: the wire stubs (``groupcoord.v1``, generated),
the error registry and the command line.
"""

__version__ = "0.1.0"
