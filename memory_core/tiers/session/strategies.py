"""Conversation strategies over a session: the living equivalent of LangChain's conversation memories.

Each strategy has LangChain's surface: ``memory_variables``, ``load(inputs) -> dict`` and
``save(inputs, outputs)`` (also as ``load_memory_variables`` / ``save_context``), with
``memory_key``, ``input_key``, ``output_key``, ``human_prefix``, ``ai_prefix`` and
``return_messages``. Where LangChain's behaviour was ambiguous, the choice is stated on
the class.

``save`` appends the exchange to the session once (``combined`` too, however many
strategies it holds) and then lets each strategy do its own follow-up work (fold old
messages into the summary, update entities, index the exchange for retrieval).

A save stores its exchange once. A failure of the summarizer in the follow-up (the
summary's fold, the entities' extraction) does not fail ``save``: it is reported apart,
typed (``stats().summary_error``, ``stats().entity_error``, and a warning), and the next
save catches up. Any other failure after the exchange was stored raises; retrying that
same save (the same inputs and outputs, on the same strategy) does not store it again,
it only runs the follow-up again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from memory_core.core.errors import InvalidRequestError, ReplyTimeout, SummarizerError
from memory_core.core.models import ChatMessage, MessageRole
from memory_core.core.tokens import TokenCounter
from memory_core.core.validation import MAX_COUNT, MAX_TOKENS, check_count
from memory_core.tiers.session.history import SessionMessage

if TYPE_CHECKING:
    from memory_core.tiers.session.session import Session


logger = logging.getLogger(__name__)

MAX_EXCHANGES = MAX_COUNT // 2
"""The most exchanges a window may hold: two messages each, as many messages as a session's history may be
asked for at once."""


class MemoryStats(BaseModel):
    """What a strategy holds and what ``load`` would return now.

    ``compression_ratio`` (summary only): tokens of the messages folded into the summary per token
    of summary; ``None`` before the first fold.
    """

    strategy: str
    messages: int
    messages_loaded: int
    tokens_loaded: int
    summary_tokens: int = 0
    summarized_messages: int = 0
    summarized_tokens: int = 0
    compression_ratio: float | None = None
    entities: int = 0
    # entity(k): why the last save's entities were not updated (they are, with the next save's), or None.
    entity_error: str | None = None
    # summary(): why the last save's fold into the summary failed (the next save folds again), or None.
    summary_error: str | None = None


class ConversationMemory:
    """The base of every strategy: key resolution, rendering, and the append-once save."""

    strategy = "base"

    def __init__(
        self,
        session: Session,
        *,
        memory_key: str = "history",
        input_key: str | None = None,
        output_key: str | None = None,
        human_prefix: str = "Human",
        ai_prefix: str = "AI",
        return_messages: bool = False,
    ) -> None:
        self.session = session
        self.memory_key = memory_key
        self.input_key = input_key
        self.output_key = output_key
        self.human_prefix = human_prefix
        self.ai_prefix = ai_prefix
        self.return_messages = return_messages
        # The exchange of a save that failed after storing it, and what was stored: a retry of that save
        # reuses it instead of storing the exchange twice.
        self._unfinished: tuple[list[ChatMessage], list[SessionMessage]] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(session={self.session.session_id!r}, memory_key={self.memory_key!r})"

    @property
    def memory_variables(self) -> list[str]:
        """The keys ``load`` returns."""
        return [self.memory_key]

    def load(self, inputs: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The memory variables for a prompt, given the chain's inputs."""
        raise NotImplementedError

    def save(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> None:
        """Appends the exchange (input as a user message, output as an assistant message) and follows up.

        A summarizer failure in the follow-up is reported apart (``stats()``), never raised. If anything else
        fails after the exchange was stored, calling ``save`` again with the same exchange does not store it
        twice: it runs the follow-up again.
        """
        saved = self._stored(self.session, self.exchange(inputs, outputs))
        self.after_save(inputs, outputs, saved)
        self._unfinished = None

    def _stored(self, session: Session, exchange: list[ChatMessage]) -> list[SessionMessage]:
        """The exchange as stored in ``session``: appended now, or by the failed save this one retries."""
        if self._unfinished is not None and self._unfinished[0] == exchange:
            return self._unfinished[1]
        saved = session.add_messages(exchange)
        self._unfinished = (exchange, saved)
        return saved

    def after_save(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any], saved: list[SessionMessage]) -> None:
        """Strategy-specific work once the exchange is in the session (nothing by default)."""

    def clear(self) -> None:
        """Forgets the session's messages, summary and entities in Redis (long-term copies stay)."""
        self.session.history.clear()

    def stats(self) -> MemoryStats:
        """Counts and sizes of what ``load`` returns now."""
        loaded = self._loaded_messages(None)
        return MemoryStats(
            strategy=self.strategy,
            messages=len(self.session.history),
            messages_loaded=len(loaded),
            tokens_loaded=self.session.tokens.count(self.buffer_string(loaded)),
        )

    # LangChain's names, for code written against it.
    def load_memory_variables(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        return self.load(inputs)

    def save_context(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> None:
        self.save(inputs, outputs)

    # -- helpers ----------------------------------------------------------------------

    def _loaded_messages(self, inputs: Mapping[str, Any] | None) -> list[ChatMessage]:
        return []

    def exchange(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> list[ChatMessage]:
        """The user and assistant messages of one ``save``."""
        return [
            ChatMessage(role=MessageRole.USER, content=_as_text(inputs[self.prompt_input_key(inputs)], "input")),
            ChatMessage(role=MessageRole.ASSISTANT, content=_as_text(outputs[self._output_key(outputs)], "output")),
        ]

    def prompt_input_key(self, inputs: Mapping[str, Any]) -> str:
        """``input_key``, or the one input that is not a memory variable (nor ``stop``), as LangChain does."""
        if not isinstance(inputs, Mapping):
            raise InvalidRequestError(f"inputs must be a dict, got {type(inputs).__name__}")
        if self.input_key is not None:
            if self.input_key not in inputs:
                raise InvalidRequestError(f"input_key {self.input_key!r} is not in the inputs {sorted(inputs)}")
            return self.input_key
        candidates = sorted(set(inputs) - {*self.memory_variables, "stop"})
        if len(candidates) != 1:
            raise InvalidRequestError(f"one input key expected, got {candidates}; set input_key")
        return candidates[0]

    def _output_key(self, outputs: Mapping[str, Any]) -> str:
        if not isinstance(outputs, Mapping):
            raise InvalidRequestError(f"outputs must be a dict, got {type(outputs).__name__}")
        if self.output_key is not None:
            if self.output_key not in outputs:
                raise InvalidRequestError(f"output_key {self.output_key!r} is not in the outputs {sorted(outputs)}")
            return self.output_key
        if len(outputs) == 1:
            return next(iter(outputs))
        if "output" in outputs:
            return "output"
        raise InvalidRequestError(f"one output key expected, got {sorted(outputs)}; set output_key")

    def prefix(self, message: ChatMessage) -> str:
        """The speaker label of a message in the string form."""
        return {
            MessageRole.USER: self.human_prefix,
            MessageRole.ASSISTANT: self.ai_prefix,
            MessageRole.SYSTEM: "System",
            MessageRole.TOOL: "Tool",
        }[message.role]

    def line(self, message: ChatMessage) -> str:
        return f"{self.prefix(message)}: {message.content}"

    def buffer_string(self, messages: Sequence[ChatMessage]) -> str:
        """LangChain's ``get_buffer_string``: one ``"Prefix: content"`` line per message."""
        return "\n".join(self.line(m) for m in messages)

    def render(self, messages: list[ChatMessage]) -> str | list[ChatMessage]:
        return list(messages) if self.return_messages else self.buffer_string(messages)


class BufferMemory(ConversationMemory):
    """Every message of the session (LangChain's ``ConversationBufferMemory``)."""

    strategy = "buffer"

    def load(self, inputs: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return {self.memory_key: self.render(self._loaded_messages(inputs))}

    def _loaded_messages(self, inputs: Mapping[str, Any] | None) -> list[ChatMessage]:
        return self.session.history.messages


class WindowMemory(BufferMemory):
    """The last ``k`` exchanges, i.e. the last ``2k`` messages (``ConversationBufferWindowMemory``).

    As in LangChain, an exchange is two messages, whatever their roles; ``k=0`` loads nothing.
    """

    strategy = "window"

    def __init__(self, session: Session, k: int = 5, **options: Any) -> None:
        super().__init__(session, **options)
        self.k = check_count(k, "k", 0, MAX_EXCHANGES)

    def _loaded_messages(self, inputs: Mapping[str, Any] | None) -> list[ChatMessage]:
        return [e.message for e in self.session.history.entries(last=2 * self.k)]


class TokenBufferMemory(BufferMemory):
    """The newest messages whose string form fits ``max_tokens`` (``ConversationTokenBufferMemory``).

    LangChain prunes the oldest messages from the stored history; here the history keeps them (they
    may be promoted to long-term memory) and only what ``load`` returns is cut. The count is taken
    on the rendered buffer, so the string handed to a prompt never exceeds the budget.
    """

    strategy = "token_buffer"

    def __init__(self, session: Session, max_tokens: int = 2000, **options: Any) -> None:
        super().__init__(session, **options)
        self.max_tokens = check_count(max_tokens, "max_tokens", 1, MAX_TOKENS)

    def _loaded_messages(self, inputs: Mapping[str, Any] | None) -> list[ChatMessage]:
        return newest_within(self.session.history.messages, self.max_tokens, self.session.tokens, self.line)


def newest_within(
    messages: Sequence[ChatMessage], budget: int, tokens: TokenCounter, line: Callable[[ChatMessage], str]
) -> list[ChatMessage]:
    """The longest suffix of ``messages`` whose joined lines count at most ``budget`` tokens.

    Counted on the real joined string (never estimated per line), so the result never exceeds the
    budget; the count only grows as older lines are added, so a binary search finds the longest.
    """
    lines = [line(m) for m in messages]

    def fits(n: int) -> bool:
        return n == 0 or tokens.count("\n".join(lines[len(lines) - n :])) <= budget

    low, high = 0, len(lines)
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return list(messages[len(messages) - low :]) if low else []


class SummaryMemory(ConversationMemory):
    """A progressive summary plus the messages not yet folded into it (``ConversationSummaryBufferMemory``).

    After a ``save``, when the unsummarized messages render to more than ``max_tokens``, a worker folds
    the oldest of them into the summary (through the summarizer: Claude when configured, the offline
    extractive one otherwise) until the rest fit. ``load`` returns the summary as a system message
    first, then the unsummarized messages. With ``wait=False`` the fold happens in the background and
    ``load`` may briefly return more than ``max_tokens``; nothing is ever dropped unsummarized.
    """

    strategy = "summary"

    def __init__(
        self,
        session: Session,
        max_tokens: int = 2000,
        *,
        model: str | None = None,
        wait: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(session, **options)
        self.max_tokens = check_count(max_tokens, "max_tokens", 1, MAX_TOKENS)
        self.model = model
        self.wait = wait
        self.summary_error: str | None = None

    def load(self, inputs: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return {self.memory_key: self.render(self._loaded_messages(inputs))}

    def _loaded_messages(self, inputs: Mapping[str, Any] | None) -> list[ChatMessage]:
        state = self.session.summary_state()
        recent = [e.message for e in self.session.history.entries(after=state.cursor)]
        head = [ChatMessage(role=MessageRole.SYSTEM, content=state.summary)] if state.summary else []
        return head + recent

    def after_save(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any], saved: list[SessionMessage]) -> None:
        state = self.session.summary_state()
        recent = [e.message for e in self.session.history.entries(after=state.cursor)]
        if self.session.tokens.count(self.buffer_string(recent)) <= self.max_tokens:
            return
        # The exchange is stored by now: a failed fold must not fail save(), or an agent that retries would
        # store the exchange twice. It is reported (summary_error, a warning); the messages stay unsummarized,
        # never lost, and the next save folds them.
        try:
            self.session.fold(self.max_tokens, model=self.model, wait=self.wait, prefixes=self._prefixes)
        except (SummarizerError, ReplyTimeout) as exc:
            self.summary_error = f"{type(exc).__name__}: {exc}"
            logger.warning("session %s: summary not updated (%s); the next save tries again", self.session, exc)
        else:
            self.summary_error = None

    @property
    def _prefixes(self) -> tuple[str, str]:
        return self.human_prefix, self.ai_prefix

    def stats(self) -> MemoryStats:
        base = super().stats()
        state = self.session.summary_state()
        summary_tokens = self.session.tokens.count(state.summary) if state.summary else 0
        ratio = state.folded_tokens / summary_tokens if summary_tokens else None
        return base.model_copy(
            update={
                "summary_tokens": summary_tokens,
                "summarized_messages": state.folded_messages,
                "summarized_tokens": state.folded_tokens,
                "compression_ratio": ratio,
                "summary_error": self.summary_error,
            }
        )


class EntityMemory(ConversationMemory):
    """The last ``k`` exchanges plus what is known about the entities the input mentions (``ConversationEntityMemory``).

    After each ``save`` a worker extracts the entities of that exchange and updates one stored summary
    per entity (Claude when configured, an offline proper-noun extractor otherwise). LangChain calls
    the model at ``load`` to find the input's entities; here ``load`` matches the input against the
    entities already known, so reading memory never waits on a model.
    """

    strategy = "entity"

    def __init__(
        self,
        session: Session,
        k: int = 3,
        *,
        entities_key: str = "entities",
        wait: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(session, **options)
        self.k = check_count(k, "k", 0, MAX_EXCHANGES)
        self.entities_key = entities_key
        self.wait = wait
        # Messages stored whose entities are not yet extracted (the cursor of the first), and why.
        self._pending_from: str | None = None
        self.entity_error: str | None = None

    @property
    def memory_variables(self) -> list[str]:
        return [self.memory_key, self.entities_key]

    def load(self, inputs: Mapping[str, Any] | None = None) -> dict[str, Any]:
        recent = self._loaded_messages(inputs)
        text = ""
        if inputs:
            text = _as_text(inputs[self.prompt_input_key(inputs)], "input")
        known = self.session.entities()
        mentioned = {name: summary for name, summary in known.items() if mentions(text, name)}
        return {self.memory_key: self.render(recent), self.entities_key: mentioned}

    def _loaded_messages(self, inputs: Mapping[str, Any] | None) -> list[ChatMessage]:
        return [e.message for e in self.session.history.entries(last=2 * self.k)]

    def after_save(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any], saved: list[SessionMessage]) -> None:
        # The exchange is stored by now: a failed extraction must not fail save(), or an agent that retries
        # would store the exchange twice. It is reported (entity_error, a warning) and its messages go
        # with the next save's extraction.
        cursors = [s.cursor for s in saved if s.cursor]
        if not cursors:
            return
        first = self._pending_from or cursors[0]
        try:
            self.session.extract_entities(first, cursors[-1], wait=self.wait)
        except (SummarizerError, ReplyTimeout) as exc:
            self._pending_from, self.entity_error = first, f"{type(exc).__name__}: {exc}"
            logger.warning("session %s: entities not updated (%s); the next save tries again", self.session, exc)
        else:
            self._pending_from = self.entity_error = None

    def stats(self) -> MemoryStats:
        counts = {"entities": len(self.session.entities()), "entity_error": self.entity_error}
        return super().stats().model_copy(update=counts)


class VectorMemory(ConversationMemory):
    """Past exchanges most relevant to the input, from a long-term set (``VectorStoreRetrieverMemory``).

    ``save`` writes the exchange as one text item (``"input: ...\\noutput: ..."``, as LangChain forms
    its documents) into the long-term set ``set_name`` of the session's namespace and key, so it is
    found again from any later session of that key. ``load`` searches it with the input.
    ``return_messages=True`` returns the texts as a list.
    """

    strategy = "vector"

    def __init__(self, session: Session, k: int = 4, *, set_name: str = "exchanges", **options: Any) -> None:
        super().__init__(session, **options)
        self.k = check_count(k, "k", 1, 100)
        self.set_name = set_name

    def load(self, inputs: Mapping[str, Any] | None = None) -> dict[str, Any]:
        texts = self._relevant(inputs)
        return {self.memory_key: texts if self.return_messages else "\n".join(texts)}

    def _relevant(self, inputs: Mapping[str, Any] | None) -> list[str]:
        if not inputs:
            return []
        query = _as_text(inputs[self.prompt_input_key(inputs)], "input")
        if not query.strip():
            return []
        hits = self.session.exchange_set(self.set_name).search(query, limit=self.k)
        return [str(hit.value) for hit in hits]

    def after_save(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any], saved: list[SessionMessage]) -> None:
        lines = [f"{k}: {_as_text(v, k)}" for k, v in inputs.items() if k not in self.memory_variables and k != "stop"]
        lines += [f"{k}: {_as_text(v, k)}" for k, v in outputs.items()]
        metadata = {"session_id": self.session.session_id}
        # Named after the exchange's first message, so a retried save writes the same item, not a second one.
        ids = [f"exchange-{saved[0].id}"] if saved else None
        self.session.exchange_set(self.set_name).add(["\n".join(lines)], ids=ids, metadatas=[metadata])

    def stats(self) -> MemoryStats:
        return MemoryStats(
            strategy=self.strategy,
            messages=len(self.session.history),
            messages_loaded=0,
            tokens_loaded=0,
        )


class CombinedMemory(ConversationMemory):
    """Several strategies at once (``CombinedMemory``); two that return the same variable are an error."""

    strategy = "combined"

    def __init__(self, memories: Sequence[ConversationMemory]) -> None:
        if not memories:
            raise InvalidRequestError("combined() needs at least one strategy")
        seen: dict[str, str] = {}
        for memory in memories:
            if not isinstance(memory, ConversationMemory):
                raise InvalidRequestError(f"combined() takes strategies, got {type(memory).__name__}")
            for variable in memory.memory_variables:
                if variable in seen:
                    raise InvalidRequestError(
                        f"memory variable {variable!r} is returned by both {seen[variable]} and {memory!r}; "
                        "give one of them another memory_key"
                    )
                seen[variable] = repr(memory)
        first = memories[0]
        super().__init__(first.session, memory_key=first.memory_key, input_key=first.input_key)
        self.memories = list(memories)

    @property
    def memory_variables(self) -> list[str]:
        return [v for memory in self.memories for v in memory.memory_variables]

    def load(self, inputs: Mapping[str, Any] | None = None) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for memory in self.memories:
            merged.update(memory.load(inputs))
        return merged

    def save(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> None:
        # Append once per session, however many strategies read it; then every strategy follows up. Each
        # strategy remembers its own session's append until the whole save is done, so a retry of a save
        # that failed part way appends to no session twice.
        saved_by_session: dict[int, list[SessionMessage]] = {}
        for memory in self.memories:
            session_id = id(memory.session)
            if session_id not in saved_by_session:
                saved_by_session[session_id] = memory._stored(memory.session, memory.exchange(inputs, outputs))
            memory.after_save(inputs, outputs, saved_by_session[session_id])
        for memory in self.memories:
            memory._unfinished = None

    def clear(self) -> None:
        for memory in self.memories:
            memory.clear()

    def stats(self) -> MemoryStats:
        parts = [memory.stats() for memory in self.memories]
        return MemoryStats(
            strategy=self.strategy,
            messages=max(p.messages for p in parts),
            messages_loaded=sum(p.messages_loaded for p in parts),
            tokens_loaded=sum(p.tokens_loaded for p in parts),
            entities=sum(p.entities for p in parts),
            entity_error=next((p.entity_error for p in parts if p.entity_error), None),
            summary_error=next((p.summary_error for p in parts if p.summary_error), None),
        )


def combined(*memories: ConversationMemory) -> CombinedMemory:
    """Several strategies read and written as one."""
    return CombinedMemory(memories)


def mentions(text: str, name: str) -> bool:
    """Whether ``text`` mentions the entity ``name`` as a whole word, ignoring case."""
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text, flags=re.IGNORECASE) is not None


def _as_text(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, ChatMessage):
        return value.content
    raise InvalidRequestError(f"{what} must be a str, got {type(value).__name__}")
