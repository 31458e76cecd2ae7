"""``atomic_write``, whose home is now common/files.py (servers/ uses it too); kept so that
``from demo.files import atomic_write`` still works."""

from common.files import atomic_write

__all__ = ["atomic_write"]
