"""What the inference workers share whatever their engine: the GenerationWorker and the engine
protocol it drives, engine inputs and outputs, the stream publisher, heartbeats and the model
fingerprint."""
