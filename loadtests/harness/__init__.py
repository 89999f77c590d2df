"""What every scenario shares: start a stack (stack), the engine baseline in a subprocess
(engine), the streaming client (client), engine/stack pairing (pairing), a stack's process trees
(procs) and the figures and result files the report reads (report)."""
