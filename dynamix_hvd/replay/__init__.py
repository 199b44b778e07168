"""Replay simulator of measured workloads and stragglers (docs/replay.md), hindsight oracle, runner."""
