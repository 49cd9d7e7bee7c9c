"""NCCL and PyTorch distributed logs: NCCL INFO / WARN lines, nccl-tests result tables, the
ProcessGroupNCCL watchdog and torchrun / elastic failures. ``parser`` holds the registered parsers;
``line`` the per-line reference path, ``vec`` the vectorized chunk path, ``pytorch`` the PyTorch
messages."""
