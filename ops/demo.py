"""The whole pipeline on embedded defaults: client -> Redis broker -> Celery worker -> MiniLM -> embedded Qdrant.

Makes sure Redis answers (starting a local one if none does), starts a worker,
writes a small real corpus through the queue, searches it, prints results and
where the data lives, and stops what it started. Safe to run again: it replaces
its own demo namespace.
"""

from __future__ import annotations

import os
import time

from stack import ROOT, redis_server, worker

from memory_core import (
    ChatMessage,
    CompactionConfig,
    LongTermMemory,
    MemoryClient,
    MemorySetNotFound,
    MessageRole,
    load_settings,
)

NAMESPACE = "demo"

FACTS = [
    ("Alice prefers green tea over coffee, no sugar.", "chat"),
    ("Alice moved from Berlin to Lyon in May 2025.", "crm"),
    ("Alice is allergic to peanuts and shellfish.", "chat"),
    ("Alice's daughter Maya starts primary school in September.", "chat"),
    ("Alice works as a structural engineer at a bridge design firm.", "crm"),
    ("Alice runs the Lyon half marathon every October.", "chat"),
    ("Alice's preferred meeting slot is Tuesday mornings before 10am.", "calendar"),
    ("Alice reads science fiction; her favourite author is Ursula K. Le Guin.", "chat"),
    ("Alice's laptop is a ThinkPad X1 running Debian.", "support"),
    ("Alice asked to be contacted by e-mail, never by phone.", "crm"),
    ("Alice is learning Japanese and plans a trip to Kyoto next spring.", "chat"),
    ("Alice's subscription renews on the 3rd of each month, billed in euros.", "billing"),
]

CHAT = [
    (MessageRole.USER, "Can you book a table for two on Friday evening?"),
    (MessageRole.ASSISTANT, "Sure. Any dietary constraints I should tell the restaurant?"),
    (MessageRole.USER, "Yes, no peanuts please, I am allergic."),
    (MessageRole.ASSISTANT, "Booked a table for two at 8pm on Friday and noted the peanut allergy."),
]

JOURNAL = [
    "Standup: the payments migration is blocked on the PCI review.",
    "The PCI review is scheduled for Thursday with the security team.",
    "Payments migration: dry run succeeded on staging last night.",
    "Hiring: two backend candidates passed the final interview.",
    "Hiring: offer letters go out on Monday after the budget sign-off.",
    "Office: the Lyon office moves to the new building in June.",
    "Office: desks and network for the new building are ordered.",
    "Payments migration go-live is planned for the first week of July.",
]

QUERIES = [
    ("what does Alice like to drink?", None),
    ("where does Alice live now?", None),
    ("food allergies", None),
    ("how should we contact her?", {"source": "crm"}),
    ("upcoming travel plans", None),
]


def _compaction_demo(alice: LongTermMemory, claude: bool) -> None:
    summarizer = "Claude" if claude else "the offline extractive summarizer (no MEMORY_ANTHROPIC__API_KEY is set)"
    journal = alice.get_or_create_memory_set(
        "journal", item_type=str, capacity=6, compaction_config=CompactionConfig(limit=3)
    )
    journal.add(JOURNAL)
    print(f"\nwrote {len(JOURNAL)} notes to 'journal' (capacity 6, limit 3): a compaction runs on its own queue,")
    print(f"folding them with {summarizer}")
    deadline = time.monotonic() + 60
    while journal.size() >= 6 and time.monotonic() < deadline:
        time.sleep(0.2)
    for item in journal.get():
        label = f"summary of {len(item.compacted_from)} notes" if item.compacted else "kept as is"
        print(f"    [{label}] {item.value}")


def _tiers_demo(client: MemoryClient, claude: bool) -> None:
    """Short-term state, a session folded into its summary, a profile, then one recall over every tier."""
    with client.short_term(NAMESPACE, "alice") as stm:  # persisted when the block ends
        stm.set("task.current", "booking a restaurant for Friday")
        stm.set("task.party_size", 2)
    session = client.session(NAMESPACE, "friday-dinner", key="alice")
    memory = session.summary(max_tokens=60)
    for (_, question), (_, answer) in zip(CHAT[::2], CHAT[1::2], strict=True):
        memory.save({"input": question}, {"output": answer})
    memory.save({"input": "Make it somewhere near the river, please."}, {"output": "Noted: riverside."})
    stats = memory.stats()
    who = "Claude" if claude else "the offline summarizer"
    print(f"\nsession 'friday-dinner' (summary strategy, 60 tokens): {stats.summarized_messages} of")
    print(f"{stats.messages} messages folded into a summary by {who}; load() now returns:")
    for line in memory.load({"input": "anything else?"})["history"].splitlines():
        print(f"    {line[:110]}")
    client.profile(NAMESPACE, "alice").update({"name": "Alice", "city": "Lyon", "contact": {"channel": "e-mail"}})
    result = client.recall(NAMESPACE, "alice", "plan Friday dinner for Alice", session_id="friday-dinner", limit=6)
    print("\nrecall across tiers for 'plan Friday dinner for Alice' (score, tier, also found in):")
    for item in result.items:
        also = f"  (also in {', '.join(item.also_in)})" if item.also_in else ""
        print(f"    {item.score:.3f}  [{item.tier}] {item.text[:80]}{also}")
    print(f"as a prompt block ({result.tokens} tokens):")
    for line in result.context.splitlines():
        print(f"    {line[:110]}")


def _env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key.startswith("MEMORY_")}
    env.setdefault("MEMORY_QDRANT__PATH", str(ROOT / ".memory-core" / "qdrant"))
    return env


def main() -> None:
    env = _env()
    os.environ.update(env)
    settings = load_settings()
    print("memory-core demo: the whole pipeline on embedded defaults\n")
    with (
        redis_server(settings.redis.url),
        worker(env, name="demo-worker", concurrency=2),
        MemoryClient(settings) as client,
    ):
        client.forget(NAMESPACE)  # a fresh start on every run
        alice = client.long_term(NAMESPACE, "alice")

        # Unrelated facts, not a conversation: no item is indexed with the words of the ones before it.
        facts = alice.get_or_create_memory_set("facts", item_type=str, capacity=1000, context_window=0)
        started = time.perf_counter()
        ids = facts.add([text for text, _ in FACTS], metadatas=[{"source": source} for _, source in FACTS])
        took = time.perf_counter() - started
        print(f"wrote {len(ids)} facts through the queue in {took * 1000:.0f} ms (durable on return)")

        chat = alice.get_or_create_memory_set("chat", item_type=ChatMessage, capacity=1000)
        chat.add([ChatMessage(role=role, content=text) for role, text in CHAT])
        print(f"wrote {chat.size()} chat messages; in insertion order:")
        for item in chat.get():
            print(f"    {item.value}")

        for query, filters in QUERIES:
            started = time.perf_counter()
            hits = facts.search(query, limit=3, filters=filters)
            took = (time.perf_counter() - started) * 1000
            shown = f"{query!r}" + (f" where {filters}" if filters else "")
            print(f"\nsearch {shown}  ({took:.0f} ms through the queue)")
            for hit in hits:
                print(f"    {hit.score:.3f}  {hit.value}  [{hit.additional_metadata.get('source')}]")

        _compaction_demo(alice, settings.anthropic.api_key is not None)

        (hit,) = chat.search("what did the user say about allergies?", limit=1)
        print(f"\nchat search 'allergies' -> {hit.value}  ({hit.score:.3f})")
        _tiers_demo(client, settings.anthropic.api_key is not None)
        try:
            client.long_term("someone-else", "alice").get_memory_set("facts")
            print("\nERROR: another namespace could see the set 'facts'")
        except MemorySetNotFound as exc:
            print(f"\nanother namespace asking for it gets MemorySetNotFound: {exc}")

    print("\nwhere the data lives:")
    print(f"    vectors + payloads: embedded Qdrant Edge at {settings.qdrant.path.resolve()}")
    print(f"    broker + caches:    Redis at {settings.redis.url} (prefix {settings.redis.key_prefix!r})")
    print(f"    worker log:         {ROOT / 'ops' / '.run' / 'demo-worker.log'}")
    print("\ndone; the worker (and any Redis this demo started) has been stopped.")


if __name__ == "__main__":
    main()
