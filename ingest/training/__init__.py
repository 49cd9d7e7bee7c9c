"""Training-loop logs: per-step progress lines, throughput and loss, for stragglers and lost
work."""
