"""Server-side session state (messages, shown items, cart, constraints) and the stores that keep it.

A store holds sessions for ``ttl_s`` seconds after their last write and at most ``max_sessions`` of
them (least recently used go first). A session keeps at most ``max_messages`` messages: the first
user message (the intent) and the most recent ones. :class:`MemorySessionStore` is the default;
:class:`RedisSessionStore` shares sessions between serving replicas (the ``redis`` package and a
reachable server; the TTL is Redis's own key expiry).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from harness.catalog import Item

AppName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
"""An app's name as the app table (``apps/__init__.py``) lists it: lowercase, digits and underscores."""


class SessionError(RuntimeError):
    """A store could not read or write a session (e.g. Redis unreachable)."""


class TokenContext(BaseModel):
    """The exact tokens the model last saw and wrote in a session (prompt + its completion), so the next prompt
    extends them token for token instead of re-rendering the chat (see :class:`harness.agent.TurnRun`).

    ``upto`` is the index in ``messages`` of the model's message these tokens end with; ``digest`` is
    :func:`harness.agent.messages_digest` of ``messages[:upto + 1]``: a trimmed or edited chat no longer
    matches, and the prompt is rendered afresh."""

    model_config = ConfigDict(extra="forbid")

    ids: list[int]
    upto: int = Field(ge=0)
    digest: str


class SessionState(BaseModel):
    """Everything a multi-turn conversation carries between turns."""

    model_config = ConfigDict(extra="forbid")

    session_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    app: AppName
    messages: list[dict[str, Any]] = Field(default_factory=list, description="Chat history, OpenAI shape.")
    shown_items: list[str] = Field(default_factory=list, description="Item ids shown to the user, oldest first.")
    cart: dict[str, int] = Field(default_factory=dict, description="item_id -> quantity.")
    constraints: dict[str, Any] = Field(default_factory=dict, description="Constraints gathered so far.")
    turns: int = 0
    context: TokenContext | None = Field(None, description="The model's exact token context (None = render).")
    created: float = Field(default_factory=time.time)
    updated: float = Field(default_factory=time.time)

    def add_to_cart(self, item: Item, quantity: int = 1) -> None:
        """Put ``quantity`` more units of ``item`` in the cart, never more than its stock: ``ValueError`` saying
        how many there are (the agent's ``cart_add`` tool and the REST cart route share this rule)."""
        total = self.cart.get(item.item_id, 0) + quantity
        if not item.in_stock:
            raise ValueError(f"{item.item_id} is out of stock")
        if item.stock is not None and total > item.stock:
            raise ValueError(f"only {item.stock} of {item.item_id} in stock ({self.cart.get(item.item_id, 0)} "
                             "already in the cart)")
        self.cart[item.item_id] = total

    def trim(self, max_messages: int, max_shown: int = 200) -> None:
        """Keep the first user message and the latest others, at most ``max_messages`` in all."""
        if max_messages < 1:
            raise ValueError(f"max_messages must be >= 1, got {max_messages}")
        if len(self.messages) > max_messages:
            first = next((i for i, m in enumerate(self.messages) if m.get("role") == "user"), None)
            latest = max_messages - 1  # room left beside the first user message
            if first is not None and latest > 0 and first < len(self.messages) - latest:
                self.messages = [self.messages[first], *self.messages[-latest:]]
            else:  # no user message, or it is among the latest anyway: keep the latest max_messages
                self.messages = self.messages[-max_messages:]
        if len(self.shown_items) > max_shown:
            self.shown_items = self.shown_items[-max_shown:]


class SessionStore(Protocol):
    """Where sessions live between turns."""

    def get(self, session_id: str) -> SessionState | None: ...

    def put(self, state: SessionState) -> None: ...

    def delete(self, session_id: str) -> bool: ...

    def __len__(self) -> int: ...


class MemorySessionStore:
    """In-process sessions: an LRU map with a TTL. Thread-safe."""

    def __init__(self, *, ttl_s: float = 1800.0, max_sessions: int = 10_000, max_messages: int = 40) -> None:
        if ttl_s <= 0 or max_sessions < 1 or max_messages < 2:
            raise ValueError("ttl_s must be > 0, max_sessions >= 1 and max_messages >= 2")
        self.ttl_s, self.max_sessions, self.max_messages = ttl_s, max_sessions, max_messages
        self._data: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session_id: str) -> SessionState | None:
        with self._lock:
            entry = self._data.get(session_id)
            if entry is None:
                return None
            written, blob = entry
            if time.monotonic() - written > self.ttl_s:
                del self._data[session_id]
                return None
            self._data.move_to_end(session_id)
        return SessionState.model_validate_json(blob)

    def put(self, state: SessionState) -> None:
        state.trim(self.max_messages)
        state.updated = time.time()
        blob = state.model_dump_json()  # a copy: later changes to ``state`` need another put
        with self._lock:
            self._data[state.session_id] = (time.monotonic(), blob)
            self._data.move_to_end(state.session_id)
            while len(self._data) > self.max_sessions:
                self._data.popitem(last=False)

    def delete(self, session_id: str) -> bool:
        with self._lock:
            return self._data.pop(session_id, None) is not None

    def __len__(self) -> int:
        """Live sessions (expired ones are dropped here, not counted)."""
        now = time.monotonic()
        with self._lock:
            for session_id in [k for k, (written, _) in self._data.items() if now - written > self.ttl_s]:
                del self._data[session_id]
            return len(self._data)


class RedisSessionStore:
    """Sessions in Redis under ``{prefix}{session_id}`` as JSON with key expiry = TTL (multi-replica serving)."""

    def __init__(self, url: str, *, ttl_s: float = 1800.0, max_messages: int = 40, prefix: str = "sidekick:session:",
                 timeout_s: float = 2.0) -> None:
        try:
            import redis
        except ImportError as e:  # pragma: no cover - redis is a dependency
            raise SessionError("the Redis session store needs the 'redis' package") from e
        if ttl_s <= 0 or max_messages < 2:
            raise ValueError("ttl_s must be > 0 and max_messages >= 2")
        self.ttl_s, self.max_messages, self.prefix = ttl_s, max_messages, prefix
        self._redis = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)

    def ping(self) -> bool:
        try:
            return bool(self._redis.ping())
        except self._errors:
            return False

    def get(self, session_id: str) -> SessionState | None:
        try:
            blob = self._redis.get(self.prefix + session_id)
        except self._errors as e:
            raise SessionError(f"redis: {e}") from e
        if blob is None:
            return None
        try:
            return SessionState.model_validate_json(blob)
        except ValidationError as e:
            raise SessionError(f"redis session {session_id!r} is corrupt: {e.errors()[0]['msg']}") from e

    def put(self, state: SessionState) -> None:
        state.trim(self.max_messages)
        state.updated = time.time()
        try:
            ttl_ms = max(1, round(self.ttl_s * 1000))  # px, not ex: a TTL of 1.8 s is not cut to 1 s
            self._redis.set(self.prefix + state.session_id, state.model_dump_json(), px=ttl_ms)
        except self._errors as e:
            raise SessionError(f"redis: {e}") from e

    def delete(self, session_id: str) -> bool:
        try:
            return bool(self._redis.delete(self.prefix + session_id))
        except self._errors as e:
            raise SessionError(f"redis: {e}") from e

    def __len__(self) -> int:
        try:
            return sum(1 for _ in self._redis.scan_iter(match=self.prefix + "*", count=1000))
        except self._errors as e:
            raise SessionError(f"redis: {e}") from e
