# Adds a static busybox to an image that has no shell tools (the OpenTelemetry collector is
# distroless), so compose can run a healthcheck inside it: `/bin/busybox wget ...`.
# The image itself is unchanged otherwise; BASE is pinned in docker-compose.yml.
ARG BASE
FROM busybox:1.37.0-musl AS busybox
FROM ${BASE}
COPY --from=busybox /bin/busybox /bin/busybox
