"""What the client loads: an app that only calls memory-core never loads the worker's engine, model or SDKs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

WORKER_ONLY = ["celery", "qdrant_edge", "qdrant_client", "onnxruntime", "tokenizers", "numpy", "anthropic", "flower"]


def test_the_client_loads_no_worker_package(redis_url: str):
    # In a fresh interpreter: this process has loaded all of them for its in-thread worker.
    script = textwrap.dedent(
        f"""
        import json, sys
        from memory_core import MemoryClient, NoWorkerAvailable, Settings

        settings = Settings(_env_file=None, redis={{"url": {redis_url!r}, "key_prefix": "mcimports"}})
        with MemoryClient(settings) as client:
            try:  # no worker under this prefix: the call goes through the whole client path, then is refused
                client.long_term("acme", "alice").get_or_create_memory_set("notes")
            except NoWorkerAvailable:
                pass
            with client.short_term("acme", "run-1") as stm:
                stm.set("plan.step", 2)
            session = client.session("acme", "chat-1")
            session.buffer().load({{}})
        print(json.dumps(sorted(m for m in {WORKER_ONLY!r} if m in sys.modules)))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
