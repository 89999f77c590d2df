"""`python -m shared.rewards.sandbox`: serve the sandbox runner."""

from shared.rewards.sandbox.server import main

main()
