# vLLM worker for GPU pools: the official vLLM OpenAI image (CUDA, vllm preinstalled) plus our code.
#   docker build -f deploy/vllm.Dockerfile -t switchyard-vllm:0.1.0 .
# The worker runs vLLM's AsyncLLM in-process (services/vllm_worker), not the image's OpenAI server.
FROM vllm/vllm-openai:v0.32.0
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SY_HEALTH_HOST=0.0.0.0 SY_VAR_DIR=/var/lib/switchyard SY_MODELS_DIR=/models \
    SY_VLLM_DTYPE=auto HF_HUB_OFFLINE=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY services ./services
COPY proto ./proto
# The image already has vllm, torch and the web stack; install only what the worker imports
# beyond it, at the pins of pyproject.toml (tests/unit/test_deploy.py checks both lists against
# the worker's imports). protobuf is pinned because the generated code needs a runtime at least
# as new as its generator.
# base image provides: vllm torch httpx pydantic safetensors starlette uvicorn fastapi psutil
RUN pip install --no-deps . && pip install \
    "aiokafka==0.14.0" \
    "protobuf==6.33.6" \
    "pydantic-settings==2.16.3" \
    "structlog==26.1.0" \
    "opentelemetry-api>=1.30,<2" \
    "opentelemetry-sdk>=1.30,<2" \
    "opentelemetry-exporter-otlp-proto-http>=1.30,<2" \
    "prometheus-client>=0.21,<1" \
    "fastapi-offline==1.7.7" \
    "nvidia-ml-py>=12,<14" \
    && mkdir -p /var/lib/switchyard /models
ENTRYPOINT []
CMD ["python3", "-m", "services.vllm_worker.main"]
