"""The worker's part of session memory: folding old turns into a summary and extracting entities."""
