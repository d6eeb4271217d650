"""memory-core behind the agent frameworks' own memory interfaces, each an optional extra.

* ``memory_core.integrations.langgraph``: ``MemoryCoreSaver`` (a checkpointer) and ``MemoryCoreStore``
  (a ``BaseStore``); ``pip install 'memory-core[langgraph]'``.
* ``memory_core.integrations.langchain``: ``MemoryCoreChatMessageHistory``; ``[langchain]``.
* ``memory_core.integrations.openai_agents``: ``MemoryCoreSession``; ``[openai-agents]``.

Each stands on the client alone (``MemoryClient`` / ``AsyncMemoryClient``), never on the engine.
"""
