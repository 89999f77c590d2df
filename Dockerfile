# One image for the Python services; the command picks the service:
#   docker run switchyard:0.1.0 python -m services.router.main
# vLLM workers use deploy/vllm.Dockerfile (the official vLLM image); this one never carries an engine.
FROM python:3.11.7-slim-bookworm
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SY_HEALTH_HOST=0.0.0.0 SY_VAR_DIR=/var/lib/switchyard SY_MODELS_DIR=/models \
    HF_HOME=/var/lib/switchyard/cache/hf HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
WORKDIR /app
# bubblewrap isolates the untrusted programs of the code_tests reward (without it they are refused).
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap && rm -rf /var/lib/apt/lists/*
# torch first, from PyTorch's CPU index: sentence-transformers (the cache's MiniLM) would otherwise
# pull the CUDA build and ~3 GiB of NVIDIA libraries into every service.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
# Dependencies before the code, so a code change reuses this layer.
COPY pyproject.toml README.md ./
RUN mkdir -p shared services proto/switchyard && pip install . && pip uninstall -y switchyard
COPY shared ./shared
COPY services ./services
COPY proto ./proto
RUN pip install --no-deps . && useradd --system --uid 10001 --home-dir /var/lib/switchyard switchyard \
    && mkdir -p /var/lib/switchyard /models && chown switchyard /var/lib/switchyard
USER switchyard
CMD ["switchyard", "--help"]
