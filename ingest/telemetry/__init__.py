"""GPU telemetry and inventory: dcgm-exporter and Prometheus exports, DCGM logs, nvidia-smi in its
text, CSV and XML forms, and the GPU / NIC topology. ``common`` holds what they share (GPU
identity, the inventory view)."""
