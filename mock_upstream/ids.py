"""Random ids in the providers' styles (``chatcmpl-…``, ``resp_…``, ``msg_…``, ``call_…``)."""

from __future__ import annotations

import secrets
import string
from typing import Final

_ALPHABET: Final = string.ascii_letters + string.digits
ID_LENGTH: Final = 24


def new_id(prefix: str) -> str:
    """``prefix`` followed by 24 random letters and digits."""
    return prefix + "".join(secrets.choice(_ALPHABET) for _ in range(ID_LENGTH))
