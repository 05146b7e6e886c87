"""The roof: the ``groupcoord`` command, the demo and the stats command. Nothing imports it but tests."""

from groupcoord.cli.main import main

__all__ = ["main"]
