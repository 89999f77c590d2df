"""Benchmarks (`make bench`): each scenario writes JSON under var/bench/."""

import os

# The benchmarks start services against their own embedded broker and stores: dev mode, not the
# production mode a set SY_KAFKA_BOOTSTRAP would otherwise mean (shared/runtime/config/).
os.environ.setdefault("SY_ENV", "dev")
