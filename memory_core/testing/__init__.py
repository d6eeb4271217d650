"""Test helpers shipped with the library: a fake Anthropic Messages API."""
