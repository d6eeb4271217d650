# One image for worker, beat and Flower, at the versions CI tested (ops/constraints.txt).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY memory_core ./memory_core
COPY ops/constraints.txt ./ops/
RUN pip install --no-cache-dir -c ops/constraints.txt ".[worker,flower,tracing]"
RUN useradd --create-home memory && mkdir -p /data && chown memory /data
USER memory
ENV MEMORY_QDRANT__PATH=/data/qdrant MEMORY_STACK__RUN_DIR=/data/run MEMORY_STACK__BACKUP_DIR=/data/backups
CMD ["memory-core", "worker"]
