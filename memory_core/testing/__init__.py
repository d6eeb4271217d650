"""Test helpers shipped with the library: fake remote APIs on loopback (Anthropic Messages, OpenAI embeddings,
a rerank endpoint) over one small server (``loopback``)."""
