"""Servers that put the client behind another door: MCP (``memory-core mcp``).

They run in the app's side of the queue: they hold a ``MemoryClient`` and never import the engine.
"""
