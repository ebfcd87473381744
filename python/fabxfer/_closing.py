"""What every handle-owning class does at the end of its life."""
from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T", bound="Closing")


class Closing:
    """``close()`` when a ``with`` block ends and when the object is
    collected. At collection errors are dropped: the interpreter may be
    shutting down, and nothing can be raised to anyone there."""

    def close(self) -> None:  # pragma: no cover - every subclass has one
        raise NotImplementedError

    def _close_when_collected(self) -> bool:
        return True

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if self._close_when_collected():
                self.close()
        except Exception:
            pass
