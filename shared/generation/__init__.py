"""What the inference workers share whatever their engine: engine inputs and outputs, the stream
publisher, heartbeats and the model fingerprint."""
