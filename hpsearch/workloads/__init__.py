"""Built-in workloads. Data ships with packages or is generated; nothing is downloaded."""
