"""Benchmarks (`make bench`): each scenario writes JSON under var/bench/."""
