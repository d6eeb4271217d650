"""Operation and message ids of formation, derived the same way by the client (its receipt) and the worker
(a replay of verbatim facts): the same messages into the same scope, with the same prompt and model, are the
same operation, however often they are sent.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from memory_core.core.models import Scope


def message_id(role: str, content: str, position: int) -> str:
    """The id of a message that came without one: from its role, its content and its place in the call."""
    digest = hashlib.sha256(json.dumps([role, content, position], ensure_ascii=False).encode()).hexdigest()
    return f"msg-{digest[:24]}"


def operation_id(scope: Scope, message_ids: Sequence[str], prompt_version: str, model: str, *, salt: str = "") -> str:
    """The operation id: a hash of the scope, the message ids (in order), the prompt version and the model."""
    fields = [*scope, list(message_ids), prompt_version, model, salt]
    return hashlib.sha256(json.dumps(fields, ensure_ascii=False).encode()).hexdigest()[:32]
