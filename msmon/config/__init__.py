"""Loading training YAMLs and the monitor_config schema."""
