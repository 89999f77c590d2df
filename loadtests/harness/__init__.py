"""What every scenario shares: start a stack (stack), the engine baseline in a subprocess
(engine), the streaming client (client), engine/stack pairing (pairing) and result files (report)."""
