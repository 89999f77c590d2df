# One image for the Python services; the command picks the service:
#   docker run switchyard python -m services.router.main
FROM python:3.11.7-slim-bookworm
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 SY_HEALTH_HOST=0.0.0.0 SY_VAR_DIR=/var/lib/switchyard
WORKDIR /app
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY services ./services
COPY proto ./proto
RUN pip install . && useradd --system --uid 10001 switchyard && mkdir -p /var/lib/switchyard \
    && chown switchyard /var/lib/switchyard
USER switchyard
CMD ["switchyard", "--help"]
