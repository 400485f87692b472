"""Request handlers, one module per area; ``KafkaApis`` (``server/apis.py``) dispatches to them.

A handler takes the request header, the decoded body and the connection, and returns a
response, a Future of one, or ``NO_RESPONSE`` (see ``server/answer.py``). Each module's class
receives the typed collaborators it needs and lists its handlers by API key; the supported
versions are in one table, ``apis.SUPPORTED_VERSIONS``.
"""

from __future__ import annotations

from typing import Any, Callable

from rivulet.protocol.framing import RequestHeader
from rivulet.server.answer import Answer
from rivulet.server.network import KafkaConnection

Handler = Callable[[RequestHeader, Any, KafkaConnection], Answer]
