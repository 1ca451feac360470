"""Text that is valid Unicode: the one check every JSON text field of the wire passes at the edge.

JSON lets a client send a lone surrogate (``"\\ud800"``): Python decodes it into a ``str`` that cannot be encoded
as UTF-8, so it fails wherever the text is next encoded (a tokenizer, a database, a log line): a 500 and, inside a
``@batched`` batch, the failure of every request in that batch. Fields typed :data:`UnicodeText`
refuse such text while the body is validated, so FastAPI answers 400 naming the field
(``Invalid request: field 'inputs.1': ...``) and nothing invalid reaches a service, a batch or an engine.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> int | None:
    """Index of the first lone surrogate code point in ``text``, or None. O(1) for ASCII text."""
    if text.isascii():
        return None
    match = _SURROGATE.search(text)
    return match.start() if match else None


def _valid_unicode(text: object) -> object:
    if not isinstance(text, str):
        return text  # pydantic's own str validation answers
    at = lone_surrogate(text)
    if at is not None:
        raise PydanticCustomError(
            "lone_surrogate",
            "text is not valid Unicode: lone surrogate U+{code} at character {at} (send UTF-8 text; a surrogate "
            "must be half of a pair)",
            {"code": f"{ord(text[at]):04X}", "at": at},
        )
    return text


UnicodeText = Annotated[str, BeforeValidator(_valid_unicode)]
"""A ``str`` without lone surrogates; use it for every string field of a request body."""
