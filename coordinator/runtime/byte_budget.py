"""How many bytes of large requests the coordinator holds at once (``max_request_bytes_in_flight``).

Past the budget a large request is refused at once (RESOURCE_EXHAUSTED) instead of being parsed:
decoded messages are several times their wire size, so this is what bounds the memory they take.
"""

from __future__ import annotations

__all__ = ["ByteBudget"]


class ByteBudget:
    """Admits sizes while their sum stays within ``limit``; each admitted size is released once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def admit(self, size: int) -> bool:
        """Whether ``size`` more bytes fit now (and counts them until ``release``)."""
        if self.held + size > self.limit:
            return False
        self.held += size
        return True

    def release(self, size: int) -> None:
        self.held -= size
