"""LangGraph's checkpointer and long-term store over memory-core (``pip install 'memory-core[langgraph]'``).

    saver = MemoryCoreSaver("acme", client=client)          # aclient= for ainvoke/astream
    store = MemoryCoreStore("acme", client=client)
    graph = builder.compile(checkpointer=saver, store=store)

``MemoryCoreSaver`` keeps LangGraph's checkpoints in the checkpoint tier (Redis, JSON only):

* A LangGraph thread is a checkpoint thread of the saver's namespace (``thread_key``). A thread id that is
  not a memory-core key (letters, digits, ``_ . -``, at most 128) is stored as ``b64.`` + its URL-safe
  base64, and so is one that already starts with ``b64.``, so no two thread ids share a key.
* Each checkpoint is one tier snapshot: the checkpoint, each channel value and the metadata, each
  serialized by the saver's ``serde`` and kept as ``[type, base64]`` pairs in the snapshot's JSON. Every
  snapshot holds the whole state: no shared channel blobs that trimming or a TTL could take from a
  checkpoint still kept.
* What is read back is data only (``serde.DataOnlySerializer``): LangGraph's own types and the saver's
  ``allowed_types``; a stored value naming anything else fails that read, typed, with nothing imported or
  called, and a value the saver could not read back is refused when it is written.
* The writes of checkpoint ``c`` in ``checkpoint_ns`` ``ns`` are snapshots of their own, one per
  ``(task_id, idx)``, in the checkpoint namespace ``ns + "\\x00writes\\x00" + c`` of the same thread
  (LangGraph never puts a NUL in a checkpoint namespace), so ``delete_thread`` and the tier's TTL and
  ``client.forget(namespace, key=thread)`` cover them too.
* ``list`` filters metadata in the client, after the tier's newest-first listing and ``before`` cursor.

``MemoryCoreStore`` keeps LangGraph's items in long-term memory sets of the store's namespace:

* A LangGraph namespace (a tuple of labels) is the memory-core key made of its labels joined by ``.``
  (labels never hold one), each label escaped to ``[A-Za-z0-9_-]``: ``_`` is ``__`` and any other
  character ``_xHH``, ``_uHHHH`` or ``_UHHHHHHHH`` (its code point): ``("users", "a@b")`` is
  ``users.a_x40b``. Reversible (``namespace_of``) and unambiguous. Its items are the set ``langgraph``.
* An item's id is the LangGraph key. Its value dict is the item metadata ``lg_value``; its text, which is
  what search indexes, is the text of the ``fields`` (``["$"]``: the value as JSON) or of ``PutOp.index``.
* ``list_namespaces`` and prefix searches read a registry: the set ``namespaces`` of the key ``langgraph``
  (a namespace LangGraph refuses to write to), one item per namespace ever written.
"""

from memory_core.integrations.langgraph.saver import MemoryCoreSaver, thread_key
from memory_core.integrations.langgraph.store import MemoryCoreStore, namespace_key, namespace_of

__all__ = ["MemoryCoreSaver", "MemoryCoreStore", "namespace_key", "namespace_of", "thread_key"]
