"""The runtime every service shares: the bus, the stage loop, settings, envelopes, telemetry,
health, storage, admission and auth. Nothing here knows a stage's business."""
