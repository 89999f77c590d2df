# NVIDIA's Triton container with what the python models in deploy/triton/models import.
# The repository itself is mounted unchanged (docker-compose.yml: ./deploy/triton/models:/models).
# 24.10 = Triton 2.51, the server the nvidia-pytriton 0.7.0 wheel ships (used by `make run`).
FROM nvcr.io/nvidia/tritonserver:24.10-py3
COPY deploy/triton/requirements.txt /tmp/requirements.txt
# The embedded server's own wheel is not needed inside NVIDIA's image.
RUN grep -v '^nvidia-pytriton' /tmp/requirements.txt > /tmp/req.txt \
 && pip install --no-cache-dir -r /tmp/req.txt
