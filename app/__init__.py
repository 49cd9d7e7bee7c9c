"""What people touch: the ``faultlens`` CLI, the dashboard, scheduled jobs and alert exporters."""
