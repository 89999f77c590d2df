# Triton Inference Server for the CPU/edge pool: NVIDIA's container with Switchyard's model repository.
#   docker build -f deploy/triton.Dockerfile -t switchyard-triton:0.1.0 .
# deploy/triton/models is the same repository the embedded server (`switchyard up`) loads, copied
# unchanged; deploy/triton/requirements.txt is the python models' environment there (the embedded
# server itself, nvidia-pytriton, is left out: the container has its own tritonserver).
# Weights (sy-tiny and the like) are mounted at /models, where SY_MODELS_DIR points.
FROM nvcr.io/nvidia/tritonserver:25.01-py3
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1 \
    SY_MODELS_DIR=/models HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME=/tmp/hf
COPY deploy/triton/requirements.txt /tmp/requirements.txt
# CPU torch first (from PyTorch's CPU index) so the requirements never pull a CUDA build.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0 \
    && grep -v '^nvidia-pytriton' /tmp/requirements.txt > /tmp/req-container.txt \
    && pip install -r /tmp/req-container.txt && mkdir -p /models
COPY deploy/triton/models /srv/triton/models
EXPOSE 8000 8001 8002
CMD ["tritonserver", "--model-repository=/srv/triton/models", "--backend-config=python,shm-default-byte-size=4194304", \
     "--http-port=8000", "--grpc-port=8001", "--metrics-port=8002", "--exit-on-error=true"]
