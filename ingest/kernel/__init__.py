"""Kernel logs: NVIDIA Xid / SXid and the other GPU-host kernel messages, in syslog, the journal,
dmesg and the Kubernetes device plugin's events. ``parser`` holds the registered parsers; ``line``
the per-line reference path, ``vec`` and ``families`` the vectorized chunk path, ``misc`` the rarer
and multi-line messages, ``patterns`` the regular expressions both paths share."""
